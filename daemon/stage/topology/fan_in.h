// FanIn: the fan-in topology (topology.h), ELECTRA's. Producers (stages 0..n-2, each with
// its own data and loss) send the consumer (stage n-1) what the objective makes of their
// batch — token IDs and replaced flags; nothing flows back but an acknowledgement per step,
// which bounds how far a producer runs ahead (max_staleness). All producers' frames reach
// the consumer in one queue, told apart by the producer index in the high 16 bits of the
// micro-batch index.
#pragma once

#include <ATen/core/Tensor.h>

#include <climits>
#include <cstdint>
#include <map>
#include <tuple>

#include "compression/wire/tensor_frame.h"
#include "daemon/stage/topology/topology.h"

namespace torch::optim {
class Optimizer;
}

namespace skytrain::stages {
class DataSource;
class ModelSource;
class Objective;
class Stage;
}  // namespace skytrain::stages

namespace skytrain::daemon {

class CodecSet;
class Profiler;
class ScheduleExecutor;
class StageLinks;
struct StageContext;
struct StepCounters;

class FanIn : public Topology {
 public:
  FanIn(const StageContext& context, StepCounters& counters, StageLinks& links, CodecSet& codecs,
        ScheduleExecutor& executor, Profiler& profiler, const stages::ModelSource& source, stages::Stage& model,
        const stages::DataSource* data, const stages::Objective& objective, torch::optim::Optimizer& optimizer);

  // A producer: waits for credit, then its own data and loss, then its frames out. The
  // consumer: every producer's micro-batches.
  void runOps(uint64_t step, double& lossSum) override;
  void endStep(uint64_t step) override;
  int lossTerms() const override;
  int lead() const override { return lead_; }
  std::optional<double> evaluate(uint64_t step) override;
  nlohmann::json profile(uint64_t step) override;

 private:
  int producers() const;
  uint16_t consumerStage() const;
  void producerStep(uint64_t step, double& lossSum);
  void consumerStep(uint64_t step, double& lossSum);
  // A producer: takes the consumer's acknowledgements; waits while more than max_staleness
  // steps ahead.
  void waitForCredit(uint64_t step);
  // The consumer's next frame of (direction, step, micro-batch) from any producer; frames of
  // later steps wait in a bounded reorder buffer.
  compression::TensorFrame takeProducerFrame(compression::FrameDirection direction, uint64_t step, uint32_t microBatch);
  at::Tensor receiveTokens(compression::FrameDirection direction, uint64_t step, uint32_t microBatch, int64_t samples);
  // Forward (with the loss) and backward on random token IDs, and a generator's token frame.
  nlohmann::json profileCompute();
  nlohmann::json probeLinks(uint64_t step);

  const StageContext& context_;
  StepCounters& counters_;
  StageLinks& links_;
  CodecSet& codecs_;
  ScheduleExecutor& executor_;
  Profiler& profiler_;
  const stages::ModelSource& source_;
  stages::Stage& model_;
  const stages::DataSource* data_;
  const stages::Objective& objective_;
  torch::optim::Optimizer& optimizer_;
  std::map<std::tuple<int, uint64_t, uint32_t>, compression::TensorFrame> early_;  // (direction, step, mb)
  static constexpr int64_t kNoAck = INT64_MIN;
  int64_t acked_ = kNoAck;  // a producer: the consumer's last acknowledged step
  int lead_ = -1;           // a producer: how far ahead the current step started
};

}  // namespace skytrain::daemon
