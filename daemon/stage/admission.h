// Admission of a stage before anything is allocated: its data files must resolve under the
// daemon's data roots and be regular files, and its estimated memory must fit the budget.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "daemon/protocol/spec/job_spec.h"

namespace skytrain::stages {
class ModelSource;
}  // namespace skytrain::stages

namespace skytrain::daemon {

// The daemon's own resident memory under a stage: LibTorch, OpenBLAS and oneDNN, ZeroMQ,
// the threads' stacks. Measured: 162 MB idle after start-up, 289 MB at the peak of a
// 0.9M-parameter stage reading a pre-tokenised corpus (docs/memory.md).
constexpr double kRuntimeBytes = 256.0 * 1024 * 1024;

// A stage's peak resident memory, estimated from the model's shapes before anything is
// allocated (docs/memory.md: within 15% of the measured peak at 124M).
struct MemoryEstimate {
  double runtimeBytes = 0;    // kRuntimeBytes
  double weightBytes = 0;     // parameters, float32
  double optimizerBytes = 0;  // gradients and AdamW's two moments
  double stashBytes = 0;      // activations kept for backward, for stashSamples samples
  int stashSamples = 0;       // the batch: the profile's first pass, or GPipe, holds it all
  double transientBytes = 0;  // freed within a step: AdamW's temporaries, tied frames, bf16 casts
  double copiesBytes = 0;     // the delayed update's copies of the stage and of its snapshots
  double dataBytes = 0;       // the token streams (first and last stage)

  double fixedBytes() const { return runtimeBytes + weightBytes + optimizerBytes + transientBytes + copiesBytes + dataBytes; }
  double totalBytes() const { return fixedBytes() + stashBytes; }
  std::string describe() const;
};

// Replaces the data files (and the SentencePiece model) of a stage that reads data with
// their resolved paths. Throws skytrain::SpecError naming the field and the path when one
// does not exist, is not under a root, or is not a regular file.
void resolveDataFiles(protocol::JobSpec& spec, int stage, const std::vector<std::string>& roots);

// The stage's memory need, from the model's shapes (a TorchScript module's from its ZIP
// directory), init_from files' headers and the data files' sizes. The activation stash,
// which a TorchScript stage measures by running its module, is left 0 when the rest
// already exceeds budgetBytes. Throws skytrain::Error naming a file that is not what it
// claims (no ZIP directory, a bad safetensors header). `source`: the spec's model source
// when the caller has one (a TorchScript source keeps what it measured), else one is made.
MemoryEstimate estimateStageMemory(const protocol::JobSpec& spec, int stage,
                                   double budgetBytes = std::numeric_limits<double>::infinity(),
                                   const stages::ModelSource* source = nullptr);

// "768.0 MB (cgroup v1 memory.limit_in_bytes of ...)": a budget and where it came from.
std::string describeBudget(double budgetBytes, const std::string& budgetSource);
// Throws skytrain::Error with the numbers when the estimate exceeds the budget.
void checkMemory(const MemoryEstimate& estimate, int stage, double budgetBytes,
                 const std::string& budgetSource = "memory_budget_mb");

}  // namespace skytrain::daemon
