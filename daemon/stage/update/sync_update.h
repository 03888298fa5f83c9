// SyncUpdate: the synchronous update (update_policy.h). A step's ops, then its gradients
// through the gradient pipeline, then one AdamW step at the step's learning rate.
#pragma once

#include <functional>

#include "daemon/stage/update/update_policy.h"

namespace torch::optim {
class Optimizer;
}

namespace skytrain::daemon {

class GradientPipeline;
struct StageContext;
struct StepCounters;

class SyncUpdate : public UpdatePolicy {
 public:
  // `ops` runs a step's forwards and backwards on `model` (the topology's).
  using Ops = std::function<void(uint64_t step, double& lossSum)>;
  // `beforeUpdate`: called just before each optimizer step (the checkpoint fence).
  // `afterUpdate`: just after it (ZeRO-1: the copies exchange their updated shards).
  SyncUpdate(const StageContext& context, StepCounters& counters, stages::Stage& model,
             torch::optim::Optimizer& optimizer, GradientPipeline& gradients, Ops ops,
             std::function<void()> beforeUpdate = {}, std::function<void()> afterUpdate = {});

  bool runStep(uint64_t step, double& lossSum) override;
  stages::Stage& active(uint64_t) override { return model_; }
  // The loss scaler's state (the gradient pipeline's): the scale and its run of good steps.
  void saveState(std::vector<std::pair<std::string, at::Tensor>>& out) const override;
  void restoreState(SnapshotReader& snapshot, int64_t step) override;

 private:
  const StageContext& context_;
  StepCounters& counters_;
  stages::Stage& model_;
  torch::optim::Optimizer& optimizer_;
  GradientPipeline& gradients_;
  Ops ops_;
  std::function<void()> beforeUpdate_, afterUpdate_;
};

// Sets every parameter group's learning rate to the schedule's value at `step`.
void setLearningRate(torch::optim::Optimizer& optimizer, const StageContext& context, uint64_t step);

}  // namespace skytrain::daemon
