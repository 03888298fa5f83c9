// Checkpoints of one hosted stage: what its future depends on, written in the background
// from a copy taken at a step boundary, and read back with every field checked.
//
// Layout: <job dir>/checkpoints/step-<8 digits>/stage-<i>.safetensors (parameters, AdamW
// state, codec state such as error-feedback residuals, RNG state) and stage-<i>.json (the
// step, the plan in force, the codecs, and the size and XXH64 of the tensors file). The
// tensors file is written first, the JSON last, each atomically: a stage's checkpoint
// exists once its JSON does. A checkpoint counts once every stage has confirmed it to the
// coordinator.
//
// Directory names and step numbers: daemon/ops/checkpoint_dirs.h.
#pragma once

#include <nlohmann/json.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/ops/checkpoint_dirs.h"
#include "stages/weights/safetensors.h"

namespace skytrain::daemon {


struct StageSnapshot {
  stages::SafeTensors tensors;
  nlohmann::json meta;  // format, job, stage, step, plan, codecs, ...
  // Its parameters and AdamW moments are the stage's own tensors, not copies: the stage
  // computes the next step's forwards and backwards meanwhile (which only read them) and
  // waits at its next optimizer step until the writer has released them (awaitReleased).
  // No copy on the critical path, and none in memory.
  bool borrowed = false;
};

// Reads the checkpoint of `stage` after `step`; throws skytrain::WireError naming the file
// and the problem (missing, truncated, corrupted, another job's or stage's, another step's).
StageSnapshot loadCheckpoint(const std::string& jobDir, const std::string& jobId, int64_t step, int stage);

// A snapshot as the two parts of a checkpoint, in memory: its JSON (with the tensors' size
// and XXH64) and its safetensors bytes. What a healthy copy of a stage sends a copy that
// rejoins (stage_worker.cpp).
struct SnapshotBytes {
  std::string meta, tensors;
};
SnapshotBytes encodeSnapshot(StageSnapshot snapshot);
// The checks loadCheckpoint makes, on bytes from anywhere; metaName and tensorsName say
// where they came from in the errors (skytrain::WireError).
StageSnapshot decodeSnapshot(const std::string& metaText, std::shared_ptr<const std::string> tensors,
                             const std::string& jobId, int64_t step, int stage, const std::string& metaName,
                             const std::string& tensorsName);

// Writes snapshots on its own thread, in order, keeping this stage's newest `keep` + 1 and
// the one `complete` names (the newest every stage has confirmed: what a restart resumes
// from, which may be older than this stage's newest few when another stage's writes
// failed), each streamed from its tensors to the file in the CPU time the stage's compute
// leaves idle.
class CheckpointWriter {
 public:
  CheckpointWriter(std::string jobDir, int stage, int keep, std::function<int64_t()> complete = {});
  ~CheckpointWriter();  // writes what is queued, then joins

  void write(int64_t step, StageSnapshot snapshot);
  // Steps written durably since the last call.
  std::vector<int64_t> takeWritten();
  // Steps whose write failed since the last call, with why (a full disk, an I/O error). A
  // failed write leaves no file of that step behind and does not stop the writer: training
  // goes on, and the next checkpoint is the retry.
  std::vector<std::pair<int64_t, std::string>> takeFailed();
  // Blocks until the queue is empty.
  void drain();
  // Blocks until no queued snapshot still borrows the stage's tensors (StageSnapshot::
  // borrowed): their bytes are written, though perhaps not yet synced to disk.
  void awaitReleased();

 private:
  void run();
  void prune(int64_t newest);

  std::string jobDir_;
  int stage_;
  int keep_;
  std::function<int64_t()> complete_;
  std::mutex mutex_;  // guards everything below
  std::condition_variable changed_;
  std::deque<std::pair<int64_t, StageSnapshot>> queue_;
  std::vector<int64_t> written_;
  std::vector<std::pair<int64_t, std::string>> kept_;  // step index, directory; oldest first
  std::vector<std::pair<int64_t, std::string>> failed_;
  bool busy_ = false;
  int borrowing_ = 0;  // snapshots queued or being written that borrow the stage's tensors
  bool stopping_ = false;
  std::thread thread_;  // encodes and writes the files
};

}  // namespace skytrain::daemon
