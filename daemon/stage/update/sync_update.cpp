#include "daemon/stage/update/sync_update.h"

#include <torch/torch.h>

#include "daemon/ops/timing.h"
#include "daemon/stage/update/gradient_checks.h"
#include "daemon/stage/update/gradient_pipeline.h"
#include "daemon/stage/runner/stage_context.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

void setLearningRate(torch::optim::Optimizer& optimizer, const StageContext& context, uint64_t step) {
  const double lr = protocol::learningRate(context.spec.optimizer, static_cast<int64_t>(step), context.spec.steps);
  for (auto& group : optimizer.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

SyncUpdate::SyncUpdate(const StageContext& context, StepCounters& counters, stages::Stage& model,
                       torch::optim::Optimizer& optimizer, GradientPipeline& gradients, Ops ops,
                       std::function<void()> beforeUpdate, std::function<void()> afterUpdate)
    : context_(context),
      counters_(counters),
      model_(model),
      optimizer_(optimizer),
      gradients_(gradients),
      ops_(std::move(ops)),
      beforeUpdate_(std::move(beforeUpdate)),
      afterUpdate_(std::move(afterUpdate)) {}

bool SyncUpdate::runStep(uint64_t step, double& lossSum) {
  ops_(step, lossSum);
  const bool update = gradients_.finish(step, model_);
  // Not compute: waiting for the checkpoint writer, or for a healing job's commit (a round
  // trip to the coordinator), which the planner's calibration must not take for compute.
  if (beforeUpdate_) beforeUpdate_();
  {
    Timed timed(counters_.computeSeconds);
    setLearningRate(optimizer_, context_, step);
    if (update) optimizer_.step();
    if (update && afterUpdate_) afterUpdate_();
    zeroGradients(model_.parameters());
  }
  SKYTRAIN_CHECK(model_.inFlight() == 0, "micro-batches left in flight after step " << step);
  return update;
}

void SyncUpdate::saveState(std::vector<std::pair<std::string, at::Tensor>>& out) const {
  gradients_.lossScaler().saveState(out);
}

void SyncUpdate::restoreState(SnapshotReader& snapshot, int64_t) { gradients_.lossScaler().restoreState(snapshot); }

}  // namespace skytrain::daemon
