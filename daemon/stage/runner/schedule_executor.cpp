#include "daemon/stage/runner/schedule_executor.h"

#include <torch/torch.h>

#include <cmath>

#include "daemon/ops/timing.h"
#include "daemon/protocol/failures.h"
#include "daemon/stage/update/loss_scaler.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

using compression::FrameDirection;

ScheduleExecutor::ScheduleExecutor(const StageContext& context, StepCounters& counters, StageLinks& links,
                                   CodecSet& codecs, const stages::ModelSource& source, stages::Stage& model,
                                   const stages::DataSource* data, const stages::Objective& objective)
    : context_(context),
      counters_(counters),
      links_(links),
      codecs_(codecs),
      source_(source),
      model_(model),
      data_(data),
      objective_(objective) {
  links_.setIdleWork([this] { return !pendingWeights_.empty(); }, [this] { runWeightPass(); });
}

void ScheduleExecutor::runStep(uint64_t step, stages::Stage& stage, double& lossSum) {
  for (const auto& op : schedule_.ops[context_.stage]) {
    if (op.kind == scheduler::OpKind::Forward) {
      forward(step, op.microBatch, stage, lossSum);
    } else {
      backward(step, op.microBatch, stage);
    }
  }
  while (!pendingWeights_.empty()) runWeightPass();  // ZB-H1: the rest after the last B
}

stages::TokenBatch ScheduleExecutor::onDevice(stages::TokenBatch batch) const {
  if (context_.device.is_cpu()) return batch;
  if (batch.inputs.defined()) batch.inputs = batch.inputs.to(context_.device);
  if (batch.targets.defined()) batch.targets = batch.targets.to(context_.device);
  return batch;
}

stages::TokenBatch ScheduleExecutor::batch(const stages::TokenBatch& drawn, uint64_t stream, int64_t firstSample) const {
  return onDevice(objective_.prepare(drawn, stream, firstSample));
}

std::vector<int64_t> ScheduleExecutor::boundaryShape(int stage, int64_t samples) const {
  return source_.inputShape(stage, samples);
}

void ScheduleExecutor::forward(uint64_t step, int microBatch, stages::Stage& stage, double& lossSum) {
  const int b = microBatchSize();
  const int64_t first = static_cast<int64_t>(context_.pipeline) * context_.spec.batchSize + microBatch * b;  // in the full draw
  stages::TokenBatch data;
  if (data_) data = batch(data_->trainBatch(step, static_cast<int>(first), b), step, first);
  const at::Tensor input = context_.isFirst() ? data.inputs
                                              : links_.receive(links_.previous(), FrameDirection::Forward, step, microBatch,
                                                               boundaryShape(context_.stage, b), data.inputs);
  at::Tensor output;
  {
    Timed timed(counters_.computeSeconds);
    if (data_ && (context_.isLast() || stage.hasOwnLoss())) stage.setTargets(data.targets);
    if (data_) stage.setTokens(data.inputs);
    // A loss of the stage's own (a sender's before a cut) is weighed as the last stage's is.
    if (stage.hasOwnLoss()) {
      stage.setOwnLossFactor((scaler_ ? scaler_->scale() : 1.0) / schedule_.microBatches);
    }
    output = stage.forward(microBatch, input);
    if (context_.isLast()) {
      // The stage keeps the graph; the loss's gradient w.r.t. the logits is taken here and
      // fed to backward() when the schedule reaches B(microBatch).
      at::Tensor logits = output.requires_grad_(true);
      at::Tensor loss = stage.loss(logits, data.targets);
      // Under loss scaling the gradient that starts backward is multiplied by a power of two;
      // the gradient pipeline divides the parameters' gradients by it (loss_scaler.h).
      at::Tensor scaled = loss / schedule_.microBatches;
      if (scaler_ && scaler_->scale() != 1.0) scaled = scaled * scaler_->scale();
      scaled.backward();
      lossGradients_[microBatch] = logits.grad();
      const double value = loss.item<double>();
      if (!std::isfinite(value) && context_.spec.optimizer.onNonfinite == "fail") {
        throw Error(std::string(protocol::kNonFinite) + "the loss of step " + std::to_string(step + 1) + " micro-batch " +
                    std::to_string(microBatch) + " is " + std::to_string(value) + " (stage " +
                    std::to_string(context_.stage) + ")");
      }
      lossSum += value;
      return;
    }
  }
  links_.transmit(links_.next(), *codecs_.forStep(step).forward, FrameDirection::Forward, step, microBatch,
                  static_cast<uint16_t>(context_.stage + 1), output, data.inputs);
}

void ScheduleExecutor::backward(uint64_t step, int microBatch, stages::Stage& stage) {
  at::Tensor grad;
  if (context_.isLast()) {
    grad = lossGradients_.at(microBatch);
    lossGradients_.erase(microBatch);
  } else {
    grad = links_.receive(links_.next(), FrameDirection::Backward, step, microBatch,
                          boundaryShape(context_.stage + 1, microBatchSize()));
  }
  at::Tensor gradInput;
  {
    Timed timed(counters_.computeSeconds);
    gradInput = stage.backward(microBatch, grad);
  }
  if (!context_.isFirst()) {
    compression::Codec* codec = codecs_.forStep(step).backward.get();
    // Under loss scaling an overflow is expected, not a fault: its Inf crosses uncompressed
    // (lossy codecs refuse non-finite input), so every stage meets it in the global norm and
    // skips the step.
    if (scaler_ && scaler_->enabled() && gradInput.defined() && !torch::isfinite(gradInput).all().item<bool>()) {
      codec = &links_.plain();
    }
    links_.transmit(links_.previous(), *codec, FrameDirection::Backward, step, microBatch,
                    static_cast<uint16_t>(context_.stage - 1), gradInput);
  }
  if (schedule_.kind == scheduler::ScheduleKind::ZeroBubbleH1) {
    pendingWeights_.push_back(microBatch);
    if (static_cast<int>(pendingWeights_.size()) > schedule_.maxPendingWeights(context_.stage)) runWeightPass();
  }
}

void ScheduleExecutor::runWeightPass() {
  Timed timed(counters_.computeSeconds);
  model_.backwardWeights(pendingWeights_.front());
  pendingWeights_.pop_front();
}

}  // namespace skytrain::daemon
