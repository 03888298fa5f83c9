// StageState: a stage's checkpoint, at a step boundary — everything the run's
// future depends on (parameters, AdamW state, codec and decoder state, the CPU RNG, the
// plan, the update policy's pending gradients) — and its restoration, which checks every
// tensor's name, shape and dtype and that the snapshot was made for this job's layers, seed,
// codecs and corpus.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "daemon/stage/state/checkpoint.h"
#include "daemon/stage/runner/run_plan.h"

namespace torch::optim {
class Optimizer;
}

namespace skytrain::stages {
class Stage;
}

namespace skytrain::daemon {

class CodecSet;
class StageLinks;
class UpdatePolicy;
struct StageContext;

class StageState {
 public:
  // `dataFingerprint`: what the stage's data source reads (stages::DataSource::fingerprint);
  // a snapshot made on another corpus is refused.
  StageState(const StageContext& context, stages::Stage& model, torch::optim::Optimizer& optimizer, CodecSet& codecs,
             StageLinks& links, UpdatePolicy& update, std::string dataFingerprint);

  // `borrow`: the parameters and AdamW moments go in as the stage's own tensors, not copies
  // (StageSnapshot::borrowed); only where nothing but the optimizer step writes them.
  // `extras`: what to hold beside the weights and AdamW's state instead of their state now
  // (extras(), kept from an earlier step boundary).
  StageSnapshot snapshot(const std::string& jobId, int64_t step, const RunPlan& plan, bool borrow,
                         const std::vector<std::pair<std::string, at::Tensor>>* extras = nullptr) const;
  // A copy of the state beside the weights and AdamW's (codec and decoder state, the RNG, the
  // loss scale), which a step's forwards and backwards move before it is applied: a healing
  // job's worker keeps this as of its last applied step (stage_worker.cpp).
  std::vector<std::pair<std::string, at::Tensor>> extras() const;
  // Restores `snapshot`; `applyPlan` installs its plan before the codecs' state is read (the
  // plan makes the codecs "auto" chose). Throws skytrain::WireError naming what is wrong.
  void restore(const StageSnapshot& snapshot, const std::function<void(const RunPlan&)>& applyPlan);

 private:
  void addExtras(std::vector<std::pair<std::string, at::Tensor>>& tensors) const;
  const StageContext& context_;
  stages::Stage& model_;
  torch::optim::Optimizer& optimizer_;
  CodecSet& codecs_;
  StageLinks& links_;
  UpdatePolicy& update_;
  std::string dataFingerprint_;
};

}  // namespace skytrain::daemon
