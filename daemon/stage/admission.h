// Admission of a stage before anything is allocated: its data files must resolve under the
// daemon's data roots and be regular files, and its estimated memory must fit the budget.
#pragma once

#include <string>
#include <vector>

#include "daemon/protocol/job_spec.h"

namespace skytrain::daemon {

struct MemoryEstimate {
  double weightBytes = 0;     // parameters, float32
  double optimizerBytes = 0;  // gradients and AdamW's two moments
  double stashBytes = 0;      // activations kept for backward at the smallest micro-batch possible
  int stashSamples = 0;       // that micro-batch
  double dataBytes = 0;       // the token streams (first and last stage)

  double fixedBytes() const { return weightBytes + optimizerBytes + dataBytes; }
  double totalBytes() const { return fixedBytes() + stashBytes; }
  std::string describe() const;
};

// Replaces the data files (and the SentencePiece model) of a stage that reads data with
// their resolved paths. Throws skytrain::SpecError naming the field and the path when one
// does not exist, is not under a root, or is not a regular file.
void resolveDataFiles(protocol::JobSpec& spec, int stage, const std::vector<std::string>& roots);

// The stage's memory need, from the model's shapes and the data files' sizes.
MemoryEstimate estimateStageMemory(const protocol::JobSpec& spec, int stage);

// "768.0 MB (cgroup v1 memory.limit_in_bytes of ...)": a budget and where it came from.
std::string describeBudget(double budgetBytes, const std::string& budgetSource);
// Throws skytrain::Error with the numbers when the estimate exceeds the budget.
void checkMemory(const MemoryEstimate& estimate, int stage, double budgetBytes,
                 const std::string& budgetSource = "memory_budget_mb");

}  // namespace skytrain::daemon
