// Chain: the default topology (topology.h). Stage i takes stage i-1's activations and sends
// its own on to stage i+1, gradients flowing back, in the order the schedule gives; the
// last stage computes the loss.
#pragma once

#include "daemon/stage/topology/topology.h"

namespace skytrain::stages {
class Stage;
}

namespace skytrain::daemon {

class Evaluation;
class Profiler;
class ScheduleExecutor;
struct StageContext;

class Chain : public Topology {
 public:
  Chain(const StageContext& context, ScheduleExecutor& executor, stages::Stage& model, Evaluation& evaluation,
        Profiler& profiler);

  void runOps(uint64_t step, double& lossSum) override;
  int lossTerms() const override;
  std::optional<double> evaluate(uint64_t step) override;
  std::map<std::string, double> evalMetrics() const override;
  nlohmann::json profile(uint64_t step) override;

 private:
  const StageContext& context_;
  ScheduleExecutor& executor_;
  stages::Stage& model_;
  Evaluation& evaluation_;
  Profiler& profiler_;
};

}  // namespace skytrain::daemon
