#include "daemon/stage/update/delayed_update.h"

#include <torch/torch.h>

#include "daemon/ops/timing.h"
#include "daemon/stage/runner/schedule_executor.h"
#include "daemon/stage/state/snapshot_reader.h"
#include "daemon/stage/update/sync_update.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

DelayedUpdate::DelayedUpdate(const StageContext& context, StepCounters& counters, stages::Stage& model,
                             std::unique_ptr<stages::Stage> copies[2], torch::optim::Optimizer& optimizer,
                             GradientPipeline& gradients, ScheduleExecutor& executor)
    : context_(context),
      counters_(counters),
      model_(model),
      copies_{std::move(copies[0]), std::move(copies[1])},
      optimizer_(optimizer),
      gradients_(gradients),
      executor_(executor) {}

DelayedUpdate::~DelayedUpdate() = default;

bool DelayedUpdate::runStep(uint64_t step, double& lossSum) {
  bool skipped = false;
  while (!pending_.empty() && pending_.front().step + 2 <= step) {
    skipped = !applyGradient(pending_.front()) || skipped;
    pending_.pop_front();
  }
  {
    Timed timed(counters_.computeSeconds);
    torch::NoGradGuard noGrad;
    std::map<std::string, at::Tensor> newest;
    for (const auto& [name, tensor] : model_.stateDict()) newest.emplace(name, tensor);
    // Predict only while step-1's gradient is still to come: after a flush W(t) is current.
    const bool predict = (deferred_ && *deferred_ + 1 == step) || (!pending_.empty() && pending_.back().step + 1 == step);
    for (auto& [name, tensor] : active(step).stateDict()) {
      const auto previous = priorWeights_.find(name);
      tensor.copy_(!predict || previous == priorWeights_.end() ? newest.at(name) : newest.at(name) * 2 - previous->second);
    }
  }
  const auto& schedule = executor_.schedule();
  const int m = schedule.microBatches;
  const int warmup = schedule.warmups.empty() ? 0 : schedule.warmups[context_.stage];
  const bool carryIn = deferred_.has_value();
  SKYTRAIN_CHECK(!carryIn || *deferred_ + 1 == step, "round " << step << " after a deferred step " << *deferred_);
  for (const auto& op : scheduler::delayedRoundOps(warmup, m, carryIn, true)) {
    if (op.kind == scheduler::OpKind::Forward) {
      executor_.forward(step, op.microBatch, active(step), lossSum);
    } else if (op.step < 0) {
      executor_.backward(step - 1, op.microBatch, active(step - 1));
      if (op.microBatch == m - 1) {
        completeGradient(step - 1);
        deferred_.reset();
      }
    } else {
      executor_.backward(step, op.microBatch, active(step));
    }
  }
  if (std::min(warmup, m) == 0) {
    completeGradient(step);
  } else {
    deferred_ = step;
  }
  // The learning rate's warm-up runs synchronously: the steps where the weights move fastest
  // are where a stale gradient costs most. Every stage flushes at the same steps.
  if (static_cast<int64_t>(step) < context_.spec.optimizer.warmupSteps) flush();
  return !skipped;
}

void DelayedUpdate::drain() {
  if (deferred_) {
    const uint64_t step = *deferred_;
    const auto& schedule = executor_.schedule();
    const int m = schedule.microBatches, warmup = std::min(m, schedule.warmups[context_.stage]);
    for (int i = m - warmup; i < m; ++i) executor_.backward(step, i, active(step));
    completeGradient(step);
    deferred_.reset();
  }
  for (auto& pending : pending_) gradients_.resolveTotal(pending);
  for (const auto& copy : copies_) {
    SKYTRAIN_CHECK(copy->inFlight() == 0, "micro-batches left in flight after draining the delayed update");
  }
}

void DelayedUpdate::flush() {
  drain();
  while (!pending_.empty()) {
    applyGradient(pending_.front());
    pending_.pop_front();
  }
}

void DelayedUpdate::completeGradient(uint64_t step) { pending_.push_back(gradients_.begin(step, active(step))); }

bool DelayedUpdate::applyGradient(PendingGradient pending) {
  gradients_.resolveTotal(pending);
  Timed timed(counters_.computeSeconds);
  auto named = GradientPipeline::gradients(active(pending.step));
  const bool update = gradients_.check(pending, named);
  std::map<std::string, at::Tensor> byName(named.begin(), named.end());
  for (auto& [name, parameter] : model_.stateDict()) {
    auto it = byName.find(name);
    if (it != byName.end()) parameter.mutable_grad() = it->second;
  }
  {
    torch::NoGradGuard noGrad;
    for (const auto& [name, tensor] : model_.stateDict()) priorWeights_[name] = tensor.detach().clone();
  }
  setLearningRate(optimizer_, context_, pending.step);
  if (update) optimizer_.step();
  // The model lets go of the copy's gradients: nothing else (a profile's backward) may add to them.
  for (auto& [name, parameter] : model_.stateDict()) parameter.mutable_grad() = at::Tensor();
  for (auto& [name, grad] : named) grad.zero_();
  return update;
}

void DelayedUpdate::saveState(std::vector<std::pair<std::string, at::Tensor>>& out) const {
  SKYTRAIN_CHECK(!deferred_, "a snapshot of the delayed update needs drain() first");
  for (const auto& [name, tensor] : priorWeights_) out.emplace_back("previous/" + name, tensor.to(at::kCPU, false, true));
  for (size_t k = 0; k < pending_.size(); ++k) {
    const auto& p = pending_[k];
    const std::string head = "pending/" + std::to_string(k) + "/";
    out.emplace_back(head + "step", torch::tensor(static_cast<int64_t>(p.step), torch::kLong));
    if (p.needsTotal) out.emplace_back(head + "total", p.total.detach().to(at::kCPU, false, true).reshape({}));
    for (const auto& [name, grad] : GradientPipeline::gradients(*copies_[p.step % 2])) {
      out.emplace_back(head + "grad/" + name, grad.detach().to(at::kCPU, false, true));
    }
  }
}

void DelayedUpdate::restoreState(SnapshotReader& snapshot, int64_t step) {
  pending_.clear();
  deferred_.reset();
  priorWeights_.clear();
  for (const auto& [name, tensor] : model_.stateDict()) {
    if (const auto value = snapshot.take("previous/" + name, tensor)) priorWeights_[name] = value->to(context_.device).clone();
  }
  for (int k = 0; k < 2; ++k) {
    const std::string head = "pending/" + std::to_string(k) + "/";
    const auto pendingStep = snapshot.take(head + "step", torch::tensor(int64_t{0}, torch::kLong));
    if (!pendingStep) break;
    PendingGradient p;
    const int64_t value = pendingStep->item<int64_t>();
    const bool inOrder = pending_.empty() || value > static_cast<int64_t>(pending_.back().step);
    if ((value != step - 1 && value != step) || !inOrder) {
      throw WireError(snapshot.where() + ": a pending gradient of step " + std::to_string(value + 1));
    }
    p.step = static_cast<uint64_t>(value);
    const auto total = snapshot.take(head + "total", torch::tensor(0.0f));
    p.needsTotal = total.has_value();
    if (total) p.total = total->clone();
    for (auto& [name, parameter] : copies_[p.step % 2]->stateDict()) {
      parameter.mutable_grad() = at::Tensor();
      if (const auto grad = snapshot.take(head + "grad/" + name, parameter)) {
        parameter.mutable_grad() = grad->to(context_.device).clone();
      }
    }
    pending_.push_back(std::move(p));
  }
}

}  // namespace skytrain::daemon
