#include "daemon/stage/update/gradient_pipeline.h"

#include <torch/torch.h>

#include <cmath>

#include "daemon/net/replica_group.h"
#include "daemon/ops/timing.h"
#include "daemon/protocol/failures.h"
#include "daemon/stage/runner/stage_links.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

using compression::FrameDirection;

GradientPipeline::GradientPipeline(const StageContext& context, StepCounters& counters, StageLinks& links, bool ownNorm)
    : context_(context), counters_(counters), links_(links), ownNorm_(ownNorm), scaler_(context.spec.optimizer.lossScale) {}

GradientPipeline::~GradientPipeline() = default;

void GradientPipeline::setReplicaGroup(std::unique_ptr<ReplicaGroup> group) { replicas_ = std::move(group); }

NamedGradients GradientPipeline::gradients(const stages::Stage& stage) {
  NamedGradients out;
  for (const auto& [name, parameter] : stage.stateDict()) {
    if (parameter.grad().defined()) out.emplace_back(name, parameter.grad());
  }
  return out;
}

bool GradientPipeline::needsTotal() const {
  const auto& o = context_.spec.optimizer;
  return o.clipNorm > 0 || o.onNonfinite != "fail" || scaler_.enabled();
}

void GradientPipeline::average(const NamedGradients& named) {
  if (!replicas_) return;
  Timed timed(counters_.allReduceSeconds);
  std::vector<at::Tensor> tensors;
  for (const auto& entry : named) tensors.push_back(entry.second);  // views of the gradients
  replicas_->average(tensors);
}

void GradientPipeline::failIfNonFinite(const NamedGradients& named, uint64_t step) const {
  if (const std::string bad = nonFiniteGradient(named, step, context_.stage); !bad.empty()) {
    throw Error(std::string(protocol::kNonFinite) + bad + " is not finite");
  }
}

std::string GradientPipeline::tiedCodecSpec(const protocol::JobSpec& spec) {
  const std::string& backward = spec.compression.backward;
  return backward == "bf16" || backward == "fp16" ? backward : "none";
}

void GradientPipeline::sumTied(uint64_t step, const stages::Stage& model) {
  const int s = context_.stage;
  for (const auto& pair : tied_) {
    if (s < pair.firstStage || s > pair.secondStage) continue;
    if (s != pair.firstStage && s != pair.secondStage) {  // between the holders: pass the frames on as they are
      compression::TensorFrame down = links_.awaitFrame(links_.previous(), FrameDirection::TiedDown, step, 0);
      down.stage = static_cast<uint16_t>(s + 1);
      links_.next().send(down);
      compression::TensorFrame up = links_.awaitFrame(links_.next(), FrameDirection::TiedUp, step, 0);
      up.stage = static_cast<uint16_t>(s - 1);
      links_.previous().send(up);
      continue;
    }
    const std::string& name = s == pair.firstStage ? pair.firstName : pair.secondName;
    at::Tensor parameter;
    for (const auto& [each, tensor] : model.namedParameters()) {
      if (each == name) parameter = tensor;
    }
    SKYTRAIN_CHECK(parameter.defined(), "stage " << s << " holds no tied parameter " << name);
    // A frozen copy adds nothing and takes nothing.
    at::Tensor grad = parameter.grad().defined() ? parameter.grad() : torch::zeros_like(parameter);
    compression::Codec& codec = links_.decoderFor(tiedCodecSpec(context_.spec));
    at::Tensor sum;
    if (s == pair.firstStage) {
      links_.transmit(links_.next(), codec, FrameDirection::TiedDown, step, 0, s + 1, grad);
      sum = links_.receive(links_.next(), FrameDirection::TiedUp, step, 0, parameter.sizes().vec());
    } else {
      sum = links_.receive(links_.previous(), FrameDirection::TiedDown, step, 0, parameter.sizes().vec()) + grad;
      // What the first holder will decode: rounding is idempotent, so the frame sent carries it exactly.
      if (&codec != &links_.plain()) sum = codec.decode(codec.encode(sum)).to(sum.device());
      links_.transmit(links_.previous(), codec, FrameDirection::TiedUp, step, 0, s - 1, sum);
    }
    if (parameter.grad().defined()) parameter.mutable_grad().copy_(sum);
  }
}

NamedGradients GradientPipeline::forNorm(const NamedGradients& named) const {
  NamedGradients out;
  for (const auto& entry : named) {
    bool copy = false;
    for (const auto& pair : tied_) copy = copy || (context_.stage == pair.secondStage && entry.first == pair.secondName);
    if (!copy) out.push_back(entry);
  }
  return out;
}

bool GradientPipeline::finish(uint64_t step, const stages::Stage& model) {
  const NamedGradients named = gradients(model);
  average(named);
  sumTied(step, model);
  {
    Timed timed(counters_.computeSeconds);
    scaler_.unscale(named);
  }
  if (!needsTotal()) {
    Timed timed(counters_.computeSeconds);
    failIfNonFinite(named, step);
    return true;
  }
  at::Tensor mine;
  {
    Timed timed(counters_.computeSeconds);
    mine = gradientNorms(forNorm(named));
  }
  const at::Tensor total = ownNorm_ ? (mine.numel() ? mine.norm(2.0) : torch::zeros({})) : exchangeNorms(step, mine);
  PendingGradient pending;
  pending.step = step;
  pending.total = total;
  Timed timed(counters_.computeSeconds);
  return check(pending, named);
}

bool GradientPipeline::check(const PendingGradient& pending, const NamedGradients& named) {
  if (!pending.needsTotal) return true;
  const auto& o = context_.spec.optimizer;
  const bool finite = std::isfinite(pending.total.item<double>());
  if (scaler_.enabled() && finite) scaler_.stepped();
  if (scaler_.enabled() && !finite) {
    // Every stage sees the same total: every stage skips and halves (the worker logs it).
    if (scaler_.overflowed()) return false;
  }
  if (!finite) {
    const std::string bad = nonFiniteGradient(named, pending.step, context_.stage);
    const std::string what = bad.empty() ? "the global gradient norm at step " + std::to_string(pending.step + 1) +
                                               " (a non-finite gradient in another stage)"
                                         : bad;
    if (o.onNonfinite == "fail") throw Error(std::string(protocol::kNonFinite) + what + " is not finite");
    return false;  // "skip": every stage sees the same total, so every stage skips
  }
  if (o.clipNorm > 0) clipGradients(named, o.clipNorm, pending.total);
  return true;
}

at::Tensor GradientPipeline::normsFromBelow(uint64_t step, const at::Tensor& mine) {
  if (context_.isLast()) return mine;
  compression::TensorFrame frame = links_.awaitFrame(links_.next(), FrameDirection::NormUp, step, 0);
  const auto& shape = frame.tensor.shape;
  if (shape.size() != 1 || shape[0] > (1 << 20) || frame.tensor.dtype != compression::WireDType::Float32) {
    throw WireError("norm frame of step " + std::to_string(step + 1) + " carries shape " + describeShape(shape) +
                    ", expected float32 [k] with k <= 2^20");
  }
  return torch::cat({mine, links_.plain().decode(frame.tensor)});
}

at::Tensor GradientPipeline::exchangeNorms(uint64_t step, const at::Tensor& mine) {
  const at::Tensor all = normsFromBelow(step, mine);
  at::Tensor total;
  if (context_.isFirst()) {
    Timed timed(counters_.computeSeconds);
    total = all.numel() == 1 ? all[0] : all.norm(2.0);
  } else {
    links_.transmit(links_.previous(), links_.plain(), FrameDirection::NormUp, step, 0, context_.stage - 1, all);
    total = receiveTotal(step);
  }
  if (!context_.isLast()) {
    links_.transmit(links_.next(), links_.plain(), FrameDirection::NormDown, step, 0, context_.stage + 1, total);
  }
  return total;
}

at::Tensor GradientPipeline::receiveTotal(uint64_t step) {
  at::Tensor total = links_.receive(links_.previous(), FrameDirection::NormDown, step, 0, {});
  // A norm is never negative: a negative one would turn clipping into a sign flip. NaN and
  // Inf go on to the job's on_nonfinite policy like a norm computed here.
  if (const double value = total.item<double>(); value < 0) {
    throw WireError("stage " + std::to_string(context_.stage - 1) + " sent a negative gradient norm (" +
                    std::to_string(value + 1) + ") for step " + std::to_string(step + 1));
  }
  return total;
}

PendingGradient GradientPipeline::begin(uint64_t step, const stages::Stage& copy) {
  SKYTRAIN_CHECK(!scaler_.enabled(), "dynamic loss scaling under the delayed update");  // the spec refuses it
  PendingGradient pending;
  pending.step = step;
  const NamedGradients named = gradients(copy);
  average(named);
  if (!needsTotal()) {  // nothing global: each stage checks its own
    Timed timed(counters_.computeSeconds);
    failIfNonFinite(named, step);
    pending.needsTotal = false;
    return pending;
  }
  at::Tensor mine;
  {
    Timed timed(counters_.computeSeconds);
    mine = gradientNorms(forNorm(named));
  }
  const at::Tensor all = normsFromBelow(step, mine);
  if (context_.isFirst()) {
    pending.total = all.numel() == 1 ? all[0] : all.norm(2.0);
    if (!context_.isLast()) {
      links_.transmit(links_.next(), links_.plain(), FrameDirection::NormDown, step, 0, context_.stage + 1, pending.total);
    }
  } else {
    links_.transmit(links_.previous(), links_.plain(), FrameDirection::NormUp, step, 0, context_.stage - 1, all);
  }
  return pending;
}

void GradientPipeline::resolveTotal(PendingGradient& pending) {
  if (!pending.needsTotal || pending.total.defined()) return;
  pending.total = receiveTotal(pending.step);
  if (!context_.isLast()) {
    links_.transmit(links_.next(), links_.plain(), FrameDirection::NormDown, pending.step, 0, context_.stage + 1,
                    pending.total);
  }
}

}  // namespace skytrain::daemon
