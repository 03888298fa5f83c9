// Where a job's checkpoints are on disk and which step each holds. No Torch: the
// coordinator rebuilds a record from these directories, the stage writes and reads them.
//
// Layout: <job dir>/checkpoints/step-<8 digits>/stage-<i>.safetensors and stage-<i>.json.
// The functions take a step's index (0-based, what the engine samples by); the directory is
// named by its number (1-based, as every interface shows it): the checkpoint after the 20th
// step, index 19, is step-00000020. Format 1 named it by the index; such a directory is still
// read (its JSON says format 1), so jobs checkpointed before the change resume.
#pragma once

#include <cstdint>
#include <string>

namespace skytrain::daemon {

constexpr int kCheckpointFormat = 2;            // directories named by step number
constexpr int kIndexNamedCheckpointFormat = 1;  // directories named by step index
constexpr size_t kMaxCheckpointMetaBytes = 1 << 20;

std::string checkpointDir(const std::string& jobDir, int64_t step);
std::string checkpointTensorsPath(const std::string& jobDir, int64_t step, int stage);
std::string checkpointMetaPath(const std::string& jobDir, int64_t step, int stage);

// The directory holding `stage`'s checkpoint after `step` (index): checkpointDir's, else a
// format-1 directory named by the index; "" when neither holds one.
std::string findCheckpointDir(const std::string& jobDir, int64_t step, int stage);

// The step index a checkpoint directory holds, from its name and the format of the JSON of a
// stage in it (a directory with none is taken as the current format); -1 if its name is not
// step-<8 digits>.
int64_t checkpointStepOf(const std::string& dir);

}  // namespace skytrain::daemon
