// DelayedUpdate: the one-step-delayed update (spec "update": "delayed"; the rounds are
// scheduler::delayedRoundOps). The weights advance as W(t) = W(t-1) - update(g(t-2)): the
// model holds the newest and the optimizer. Step t's gradient is applied to W(t+1), which
// does not exist yet when step t runs, so step t runs on a prediction of it, the last update
// repeated: 2 W(t) - W(t-1) (weight prediction, as SpecTrain does for PipeDream). Two working
// copies run the even and the odd steps, so step t's forwards and step t-1's deferred
// backwards each find the weights they were stashed with. A gradient's global norm travels
// up the pipeline when its last backward ends and down again among the next step's frames,
// so no step waits for another's drain.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "daemon/stage/update/gradient_pipeline.h"
#include "daemon/stage/update/update_policy.h"

namespace torch::optim {
class Optimizer;
}

namespace skytrain::daemon {

class ScheduleExecutor;

class DelayedUpdate : public UpdatePolicy {
 public:
  // `copies`: two more builds of the stage, on its device, whose values come from `model`
  // at each round's start.
  DelayedUpdate(const StageContext& context, StepCounters& counters, stages::Stage& model,
                std::unique_ptr<stages::Stage> copies[2], torch::optim::Optimizer& optimizer,
                GradientPipeline& gradients, ScheduleExecutor& executor);
  ~DelayedUpdate() override;

  // A round: the pending gradients two steps old are applied to the model, which is copied
  // into the step's working copy; then the step's ops, the previous step's deferred
  // backwards among them.
  bool runStep(uint64_t step, double& lossSum) override;
  stages::Stage& active(uint64_t step) override { return *copies_[step % 2]; }
  // drain() runs the backwards the last round deferred and learns every pending gradient's
  // global norm; the gradients stay pending (the update's arithmetic does not depend on
  // where boundaries fall). flush() drains, then applies them.
  void drain() override;
  void flush() override;
  // "previous/<name>" (the model before its last update) and "pending/<k>/..." (each
  // pending gradient's step, total and tensors).
  void saveState(std::vector<std::pair<std::string, at::Tensor>>& out) const override;
  void restoreState(SnapshotReader& snapshot, int64_t step) override;

 private:
  // After a step's last backward on this stage: its gradient joins the pending ones.
  void completeGradient(uint64_t step);
  bool applyGradient(PendingGradient pending);  // false: skipped (a non-finite total)

  const StageContext& context_;
  StepCounters& counters_;
  stages::Stage& model_;
  std::unique_ptr<stages::Stage> copies_[2];  // working copies for even and odd steps
  torch::optim::Optimizer& optimizer_;
  GradientPipeline& gradients_;
  ScheduleExecutor& executor_;
  std::deque<PendingGradient> pending_;             // complete gradients not yet applied, oldest first
  std::optional<uint64_t> deferred_;                // the step whose last backwards the next round runs
  std::map<std::string, at::Tensor> priorWeights_;  // the model before its last update (weight prediction)
};

}  // namespace skytrain::daemon
