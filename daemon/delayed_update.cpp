// PipelineRunner under the one-step-delayed update (spec "update": "delayed"; the rounds
// are scheduler::delayedRoundOps). The weights advance as W(t) = W(t-1) - update(g(t-2)):
// model_ holds the newest and the optimizer. Step t's gradient is applied to W(t+1), which
// does not exist yet when step t runs, so step t runs on a prediction of it, the last update
// repeated: 2 W(t) - W(t-1) (weight prediction, as SpecTrain does for PipeDream). Two working
// copies run the even and the odd steps, so step t's forwards and step t-1's deferred
// backwards each find the weights they were stashed with. A gradient's global norm travels
// up the pipeline when its last backward ends and down again among the next step's frames,
// so no step waits for another's drain.
#include <torch/torch.h>

#include <cmath>

#include "compression/codec_registry.h"
#include "daemon/gradient_checks.h"
#include "daemon/pipeline_runner.h"
#include "daemon/replica_group.h"
#include "daemon/timing.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

using compression::FrameDirection;

std::vector<std::pair<std::string, at::Tensor>> PipelineRunner::gradients(stages::Stage& copy) const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, parameter] : copy.stateDict()) {
    if (parameter.grad().defined()) out.emplace_back(name, parameter.grad());
  }
  return out;
}

void PipelineRunner::averageOverReplicas(const NamedGradients& named) {
  if (!replicas_) return;
  Timed timed(allReduceSeconds_);
  std::vector<at::Tensor> tensors;
  for (const auto& entry : named) tensors.push_back(entry.second);  // views of the gradients
  replicas_->average(tensors);
}

void PipelineRunner::runRound(uint64_t step, double& lossSum, bool& skipped) {
  while (!pending_.empty() && pending_.front().step + 2 <= step) {
    skipped = !applyGradient(pending_.front()) || skipped;
    pending_.pop_front();
  }
  {
    Timed timed(computeSeconds_);
    torch::NoGradGuard noGrad;
    std::map<std::string, at::Tensor> newest;
    for (const auto& [name, tensor] : model_->stateDict()) newest.emplace(name, tensor);
    // Predict only while step-1's gradient is still to come: after a flush W(t) is current.
    const bool predict = (deferred_ && *deferred_ + 1 == step) || (!pending_.empty() && pending_.back().step + 1 == step);
    for (auto& [name, tensor] : active(step).stateDict()) {
      const auto previous = priorWeights_.find(name);
      tensor.copy_(!predict || previous == priorWeights_.end() ? newest.at(name) : newest.at(name) * 2 - previous->second);
    }
  }
  const int m = schedule_.microBatches;
  const int warmup = schedule_.warmups.empty() ? 0 : schedule_.warmups[stage_];
  const bool carryIn = deferred_.has_value();
  SKYTRAIN_CHECK(!carryIn || *deferred_ + 1 == step, "round " << step << " after a deferred step " << *deferred_);
  for (const auto& op : scheduler::delayedRoundOps(warmup, m, carryIn, true)) {
    if (op.kind == scheduler::OpKind::Forward) {
      forward(step, op.microBatch, lossSum);
    } else if (op.step < 0) {
      backward(step - 1, op.microBatch);
      if (op.microBatch == m - 1) {
        completeGradient(step - 1);
        deferred_.reset();
      }
    } else {
      backward(step, op.microBatch);
    }
  }
  if (std::min(warmup, m) == 0) {
    completeGradient(step);
  } else {
    deferred_ = step;
  }
  // The learning rate's warm-up runs synchronously: the steps where the weights move fastest
  // are where a stale gradient costs most. Every stage flushes at the same steps.
  if (static_cast<int64_t>(step) < spec_.optimizer.warmupSteps) flush();
}

void PipelineRunner::drain() {
  if (!delayed_) return;
  if (deferred_) {
    const uint64_t step = *deferred_;
    const int m = schedule_.microBatches, warmup = std::min(m, schedule_.warmups[stage_]);
    for (int i = m - warmup; i < m; ++i) backward(step, i);
    completeGradient(step);
    deferred_.reset();
  }
  for (auto& pending : pending_) resolveTotal(pending);
  for (const auto& copy : copies_) {
    SKYTRAIN_CHECK(copy->inFlight() == 0, "micro-batches left in flight after draining the delayed update");
  }
}

void PipelineRunner::flush() {
  if (!delayed_) return;
  drain();
  while (!pending_.empty()) {
    applyGradient(pending_.front());
    pending_.pop_front();
  }
}

void PipelineRunner::completeGradient(uint64_t step) {
  PendingGradient pending;
  pending.step = step;
  const NamedGradients named = gradients(active(step));
  averageOverReplicas(named);
  const auto& o = spec_.optimizer;
  if (o.clipNorm <= 0 && o.onNonfinite == "fail") {  // nothing global: each stage checks its own
    Timed timed(computeSeconds_);
    if (const std::string bad = nonFiniteGradient(named, step, stage_); !bad.empty()) {
      throw Error(std::string(kNonFinite) + bad + " is not finite");
    }
    pending.needsTotal = false;
    pending_.push_back(std::move(pending));
    return;
  }
  at::Tensor all;
  {
    Timed timed(computeSeconds_);
    all = gradientNorms(named);
  }
  compression::Codec& plain = decoderFor("none");
  if (!isLast()) {
    compression::TensorFrame frame = awaitFrame(*next_, FrameDirection::NormUp, step, 0);
    const auto& shape = frame.tensor.shape;
    if (shape.size() != 1 || shape[0] > (1 << 20) || frame.tensor.dtype != compression::WireDType::Float32) {
      throw WireError("norm frame of step " + std::to_string(step) + " is not float32 [k] with k <= 2^20");
    }
    all = torch::cat({all, plain.decode(frame.tensor)});
  }
  if (isFirst()) {
    pending.total = all.numel() == 1 ? all[0] : all.norm(2.0);
    if (!isLast()) transmit(*next_, plain, FrameDirection::NormDown, step, 0, stage_ + 1, pending.total);
  } else {
    transmit(*previous_, plain, FrameDirection::NormUp, step, 0, stage_ - 1, all);
  }
  pending_.push_back(std::move(pending));
}

void PipelineRunner::resolveTotal(PendingGradient& pending) {
  if (!pending.needsTotal || pending.total.defined()) return;
  pending.total = receiveNormTotal(pending.step);
  if (!isLast()) transmit(*next_, decoderFor("none"), FrameDirection::NormDown, pending.step, 0, stage_ + 1, pending.total);
}

bool PipelineRunner::applyGradient(PendingGradient pending) {
  resolveTotal(pending);
  Timed timed(computeSeconds_);
  stages::Stage& copy = active(pending.step);
  auto named = gradients(copy);
  bool update = true;
  const auto& o = spec_.optimizer;
  if (pending.needsTotal) {
    if (!std::isfinite(pending.total.item<double>())) {
      std::string what = nonFiniteGradient(named, pending.step, stage_);
      if (what.empty()) what = "the global gradient norm at step " + std::to_string(pending.step);
      if (o.onNonfinite == "fail") throw Error(std::string(kNonFinite) + what + " is not finite");
      update = false;  // "skip": every stage sees the same total
    } else if (o.clipNorm > 0) {
      clipGradients(named, o.clipNorm, pending.total);
    }
  }
  std::map<std::string, at::Tensor> byName(named.begin(), named.end());
  for (auto& [name, parameter] : model_->stateDict()) {
    auto it = byName.find(name);
    if (it != byName.end()) parameter.mutable_grad() = it->second;
  }
  {
    torch::NoGradGuard noGrad;
    for (const auto& [name, tensor] : model_->stateDict()) priorWeights_[name] = tensor.detach().clone();
  }
  const double lr = protocol::learningRate(spec_.optimizer, static_cast<int64_t>(pending.step), spec_.steps);
  for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  if (update) optimizer_->step();
  // model_ lets go of the copy's gradients: nothing else (a profile's backward) may add to them.
  for (auto& [name, parameter] : model_->stateDict()) parameter.mutable_grad() = at::Tensor();
  for (auto& [name, grad] : named) grad.zero_();
  return update;
}

}  // namespace skytrain::daemon
