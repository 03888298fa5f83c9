// UpdatePolicy: when a step's gradients reach the weights. "sync" (sync_update.h) applies
// them at the step's end, so the pipeline computes the same update as one process;
// "delayed" (delayed_update.h) overlaps a step's last backwards with the next step's
// forwards and applies each gradient one step late.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stages/stage.h"

namespace skytrain::daemon {

class SnapshotReader;

class UpdatePolicy {
 public:
  virtual ~UpdatePolicy() = default;

  // Runs step `step` on this stage — its ops and whatever update falls due — adding its
  // losses to lossSum. False: a non-finite gradient skipped an update (on_nonfinite "skip").
  virtual bool runStep(uint64_t step, double& lossSum) = 0;
  // The copy of the stage the ops of `step` run on.
  virtual stages::Stage& active(uint64_t step) = 0;

  // At a boundary every stage reaches at the same step (a checkpoint, a validation, a
  // profile): drain() finishes what the last step left in flight, so no frame of it stays
  // on the wire; flush() drains, then applies every pending gradient (the job's end).
  virtual void drain() {}
  virtual void flush() {}

  // What the policy's future depends on besides the weights and the optimizer (pending
  // gradients), for checkpoints, and its restoration from a snapshot of step `step`.
  virtual void saveState(std::vector<std::pair<std::string, at::Tensor>>& out) const {}
  virtual void restoreState(SnapshotReader& snapshot, int64_t step) {}
};

}  // namespace skytrain::daemon
