#include "daemon/pipeline_runner.h"

#include <torch/torch.h>

#include <cmath>

#include "compression/codec_registry.h"
#include "daemon/files.h"
#include "daemon/gradient_checks.h"
#include "daemon/replica_group.h"
#include "daemon/timing.h"
#include "scheduler/error.h"
#include "stages/gpt.h"
#include "stages/electra.h"
#include "stages/translation.h"
#include "stages/safetensors.h"
#include "stages/weights.h"

namespace skytrain::daemon {
namespace {

using compression::FrameDirection;

}  // namespace

PipelineRunner::PipelineRunner(const protocol::JobSpec& spec, int stage, uint64_t jobKey, double memoryBudgetBytes,
                               int replica)
    : spec_(spec), stage_(stage), replica_(replica), jobKey_(jobKey), memoryBudgetBytes_(memoryBudgetBytes) {
  spec_.batchSize = spec.batchSize / protocol::replicaCount(spec);  // this copy's share
  device_ = c10::Device(protocol::placementOf(spec, protocol::slotOf(spec, stage, replica)).device);
  RunPlan initial;
  initial.microBatches = spec.microBatches > 0 ? spec.microBatches : 1;
  const auto kind = scheduler::parseScheduleKind(spec.schedule);
  // Kinds with warm-up depths from the links wait for the coordinator's plan.
  if (kind && *kind != scheduler::ScheduleKind::OneFOneBDelayAware && *kind != scheduler::ScheduleKind::ZeroBubbleH1) {
    initial.schedule = *kind;
  }
  setPlan(initial);
  source_ = stages::makeModelSource(modelConfig(spec));
  try {
    model_ = source_->build(stage);
    parameterCounts_ = stages::applyTrainable(*model_, spec.model.trainable);
    std::vector<std::string> files = spec.model.initFrom;
    const auto& own = spec.stages.at(stage).initFrom;
    files.insert(files.end(), own.begin(), own.end());
    for (const auto& file : files) {
      const auto result = stages::initialiseFrom(
          *model_, stages::decodeSafetensors(readFile(file, kMaxInitBytes), file), file, source_->namePrefix(stage));
      initReport_.push_back({{"file", file}, {"loaded", result.loaded}, {"from_seed", result.fromSeed.size()}});
    }
  } catch (const Error& e) {  // WireError (a malformed file) included
    throw Error(std::string(kBadModel) + e.what());
  }
  auto toDevice = [&](stages::Stage& stage) {
    if (device_.is_cpu()) return;
    torch::NoGradGuard noGrad;  // parameters and buffers in place, as Module.to() does
    for (auto& [name, tensor] : stage.stateDict()) tensor.set_data(tensor.to(device_));
  };
  toDevice(*model_);
  delayed_ = spec.update == "delayed";
  for (auto& copy : copies_) {
    if (!delayed_) break;
    copy = source_->build(stage);  // its values come from model_ at each round's start
    stages::applyTrainable(*copy, spec.model.trainable);
    toDevice(*copy);
  }

  fanIn_ = source_->fanIn();
  if (readsData()) {
    data_ = makeDataSource(spec, stage);
    // [MASK] (or a classifier's padding) is the ID one past the tokenizer's.
    maskId_ = data_->tokenizer().vocabSize();
    const bool masks = fanIn_ || spec.model.kind == "encoder" || spec.model.kind == "classifier";
    const bool translation = spec.model.kind == "translation";
    const int needed = data_->tokenizer().vocabSize() + (translation ? stages::kTranslationSpecials : masks ? 1 : 0);
    if (needed > spec.model.vocabSize) {
      throw SpecError("$.model.vocab_size", std::to_string(spec.model.vocabSize) + " is smaller than tokenizer " +
                                                data_->tokenizer().name() + "'s " +
                                                std::to_string(data_->tokenizer().vocabSize()) +
                                                (translation ? " plus [PAD], [BOS], [EOS]" : masks ? " plus the [MASK] token" : ""));
    }
  }
  const auto& o = spec.optimizer;
  optimizer_ = std::make_unique<torch::optim::AdamW>(
      model_->parameters(),
      torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weightDecay));
  const auto& codecs = compression::builtinCodecs();
  // "auto" directions start uncompressed; the plan names their codecs (setPlan).
  steadyForward_ = spec.compression.forward == "auto" ? "none" : spec.compression.forward;
  steadyBackward_ = spec.compression.backward == "auto" ? "none" : spec.compression.backward;
  steady_ = {codecs.make(steadyForward_), codecs.make(steadyBackward_)};
  warmup_ = {codecs.make(spec.compression.warmup), codecs.make(spec.compression.warmup)};
  evalCodec_ = codecs.make(steadyForward_);
}

PipelineRunner::~PipelineRunner() = default;

void PipelineRunner::setReplicaGroup(std::unique_ptr<ReplicaGroup> group) { replicas_ = std::move(group); }

void PipelineRunner::setPlan(const RunPlan& plan) {
  if (plan.microBatches < 1 || spec_.batchSize % plan.microBatches != 0) {
    throw Error("plan: " + std::to_string(plan.microBatches) + " micro-batches do not divide " +
                (replica_ > 0 || protocol::replicaCount(spec_) > 1 ? "a replica's share of batch_size, "
                                                                   : "batch_size ") +
                std::to_string(spec_.batchSize));
  }
  schedule_ = scheduler::makeSchedule(plan.schedule, static_cast<int>(spec_.stages.size()), plan.microBatches,
                                      plan.warmups);
  const std::string problem = scheduler::validateSchedule(schedule_);
  if (!problem.empty()) throw Error("plan: schedule " + scheduler::toString(plan.schedule) + ": " + problem);
  const auto& registry = compression::builtinCodecs();
  if (spec_.compression.forward == "auto" && !plan.forwardCodec.empty() && plan.forwardCodec != steadyForward_) {
    steady_.forward = registry.make(plan.forwardCodec);  // throws on an unknown spec, before anything changes
    steadyForward_ = plan.forwardCodec;
  }
  if (spec_.compression.backward == "auto" && !plan.backwardCodec.empty() && plan.backwardCodec != steadyBackward_) {
    steady_.backward = registry.make(plan.backwardCodec);
    steadyBackward_ = plan.backwardCodec;
  }
  if (model_) model_->setSplitBackward(plan.schedule == scheduler::ScheduleKind::ZeroBubbleH1);
  plan_ = plan;
  plan_.forwardCodec = steadyForward_;
  plan_.backwardCodec = steadyBackward_;
}

void PipelineRunner::connect(std::unique_ptr<PeerLink> previous, std::unique_ptr<PeerLink> next) {
  if (fanIn_) {
    SKYTRAIN_CHECK(!previous && next && !isLast(), "links do not match fan-in producer " << stage_);
  } else {
    SKYTRAIN_CHECK(isFirst() == !previous && isLast() == !next, "links do not match stage " << stage_);
  }
  previous_ = std::move(previous);
  next_ = std::move(next);
}

void PipelineRunner::connectProducers(std::vector<std::unique_ptr<PeerLink>> producers) {
  SKYTRAIN_CHECK(fanIn_ && isLast() && static_cast<int>(producers.size()) == this->producers(),
                 "producer links do not match stage " << stage_);
  producerLinks_ = std::move(producers);
}

uint64_t PipelineRunner::bytesSent() const {
  uint64_t sent = (previous_ ? previous_->bytesSent() : 0) + (next_ ? next_->bytesSent() : 0);
  for (const auto& link : producerLinks_) sent += link->bytesSent();
  return sent;
}

StepStats PipelineRunner::runStep(uint64_t step) {
  const auto start = Clock::now();
  const uint64_t bytesBefore = bytesSent();
  const uint64_t backwardBefore = previous_ ? previous_->bytesSent() : 0;
  computeSeconds_ = 0;
  allReduceSeconds_ = 0;
  bytesRaw_ = 0;
  rawBackward_ = 0;
  codecs_ = static_cast<int64_t>(step) < spec_.compression.warmupSteps ? &warmup_ : &steady_;
  StepStats stats;
  double lossSum = 0;
  if (fanIn_ && isLast()) {
    consumerStep(step, lossSum);
  } else if (fanIn_) {
    waitForCredit(step);
    stats.lead = lead_;
    producerStep(step, lossSum);
  } else if (delayed_) {
    runRound(step, lossSum, stats.skipped);
  } else {
    for (const auto& op : schedule_.ops[stage_]) {
      if (op.kind == scheduler::OpKind::Forward) {
        forward(step, op.microBatch, lossSum);
      } else {
        backward(step, op.microBatch);
      }
    }
    while (!pendingWeights_.empty()) runWeightPass();  // ZB-H1: the rest after the last B
  }
  const double lr = protocol::learningRate(spec_.optimizer, static_cast<int64_t>(step), spec_.steps);
  if (!delayed_) {
    const bool update = finishGradients(step);
    {
      Timed timed(computeSeconds_);
      for (auto& group : optimizer_->param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
      if (update) optimizer_->step();
      optimizer_->zero_grad();
    }
    SKYTRAIN_CHECK(model_->inFlight() == 0, "micro-batches left in flight after step " << step);
    stats.skipped = !update;
  }
  if (fanIn_ && isLast()) acknowledge(step);
  stats.lr = lr;
  const int lossTerms = schedule_.microBatches * (fanIn_ && isLast() ? producers() : 1);
  stats.loss = isLast() || fanIn_ ? lossSum / lossTerms : std::nan("");
  stats.computeSeconds = computeSeconds_;
  stats.allReduceSeconds = allReduceSeconds_;
  stats.bytesSent = bytesSent() - bytesBefore;
  stats.bytesRaw = bytesRaw_;
  stats.bytesBackward = (previous_ ? previous_->bytesSent() : 0) - backwardBefore;
  stats.rawBackward = rawBackward_;
  stats.stepSeconds = secondsSince(start);
  return stats;
}

stages::TokenBatch PipelineRunner::onDevice(stages::TokenBatch batch) const {
  if (device_.is_cpu()) return batch;
  if (batch.inputs.defined()) batch.inputs = batch.inputs.to(device_);
  if (batch.targets.defined()) batch.targets = batch.targets.to(device_);
  return batch;
}

stages::TokenBatch PipelineRunner::masked(stages::TokenBatch batch, uint64_t step, int64_t firstSample) const {
  if (spec_.model.kind != "encoder") return batch;
  // The first and the last stage draw the same mask: it depends on (seed, step, sample) alone.
  auto m = stages::maskTokens(batch.inputs, spec_.seed, step, firstSample, maskId_, data_->tokenizer().vocabSize(),
                              spec_.model.maskRate);
  return {std::move(m.inputs), std::move(m.targets)};
}

void PipelineRunner::forward(uint64_t step, int microBatch, double& lossSum) {
  const int b = spec_.batchSize / schedule_.microBatches;
  const int64_t first = static_cast<int64_t>(replica_) * spec_.batchSize + microBatch * b;  // in the full draw
  stages::TokenBatch batch;
  if (data_) batch = onDevice(masked(data_->trainBatch(step, first, b), step, first));
  const at::Tensor input =
      isFirst() ? batch.inputs
                : receive(*previous_, FrameDirection::Forward, step, microBatch, boundaryShape(stage_, b), batch.inputs);
  at::Tensor output;
  {
    Timed timed(computeSeconds_);
    if (isLast() && data_) active(step).setTargets(batch.targets);
    output = active(step).forward(microBatch, input);
    if (isLast()) {
      // The stage keeps the graph; the loss's gradient w.r.t. the logits is taken here and
      // fed to backward() when the schedule reaches B(microBatch).
      at::Tensor logits = output.requires_grad_(true);
      at::Tensor loss = active(step).loss(logits, batch.targets);
      (loss / schedule_.microBatches).backward();
      lossGradients_[microBatch] = logits.grad();
      const double value = loss.item<double>();
      if (!std::isfinite(value) && spec_.optimizer.onNonfinite == "fail") {
        throw Error(std::string(kNonFinite) + "the loss of step " + std::to_string(step) + " micro-batch " +
                    std::to_string(microBatch) + " is " + std::to_string(value) + " (stage " + std::to_string(stage_) + ")");
      }
      lossSum += value;
      return;
    }
  }
  transmit(*next_, *codecsFor(step).forward, FrameDirection::Forward, step, microBatch, stage_ + 1, output, batch.inputs);
}

void PipelineRunner::backward(uint64_t step, int microBatch) {
  at::Tensor grad;
  if (isLast()) {
    grad = lossGradients_.at(microBatch);
    lossGradients_.erase(microBatch);
  } else {
    grad = receive(*next_, FrameDirection::Backward, step, microBatch,
                   boundaryShape(stage_ + 1, spec_.batchSize / schedule_.microBatches));
  }
  at::Tensor gradInput;
  {
    Timed timed(computeSeconds_);
    gradInput = active(step).backward(microBatch, grad);
  }
  if (!isFirst()) {
    transmit(*previous_, *codecsFor(step).backward, FrameDirection::Backward, step, microBatch, stage_ - 1, gradInput);
  }
  if (schedule_.kind == scheduler::ScheduleKind::ZeroBubbleH1) {
    pendingWeights_.push_back(microBatch);
    if (static_cast<int>(pendingWeights_.size()) > schedule_.maxPendingWeights(stage_)) runWeightPass();
  }
}

void PipelineRunner::runWeightPass() {
  Timed timed(computeSeconds_);
  model_->backwardWeights(pendingWeights_.front());
  pendingWeights_.pop_front();
}

bool PipelineRunner::finishGradients(uint64_t step) {
  const auto& o = spec_.optimizer;
  const NamedGradients named = gradients(*model_);
  averageOverReplicas(named);
  if (o.clipNorm <= 0 && o.onNonfinite == "fail") {
    Timed timed(computeSeconds_);
    if (const std::string bad = nonFiniteGradient(named, step, stage_); !bad.empty()) {
      throw Error(std::string(kNonFinite) + bad + " is not finite");
    }
    return true;
  }
  at::Tensor mine;
  {
    Timed timed(computeSeconds_);
    mine = gradientNorms(named);
  }
  // A fan-in's stages train separate models: each clips by its own norm.
  const at::Tensor total = fanIn_ ? (mine.numel() ? mine.norm(2.0) : torch::zeros({})) : exchangeNorms(step, mine);
  Timed timed(computeSeconds_);
  if (!std::isfinite(total.item<double>())) {
    const std::string bad = nonFiniteGradient(named, step, stage_);
    const std::string what = bad.empty() ? "the global gradient norm at step " + std::to_string(step) +
                                               " (a non-finite gradient in another stage)"
                                         : bad;
    if (o.onNonfinite == "fail") throw Error(std::string(kNonFinite) + what + " is not finite");
    return false;  // "skip": every stage sees the same total, so every stage skips
  }
  if (o.clipNorm > 0) clipGradients(named, o.clipNorm, total);
  return true;
}

std::vector<int64_t> PipelineRunner::boundaryShape(int stage, int64_t samples) const {
  return source_->inputShape(stage, samples);
}

std::string PipelineRunner::serializedState() const {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : model_->stateDict()) dict.insert(name, tensor.detach().to(at::kCPU, false, true));
  const std::vector<char> bytes = torch::pickle_save(dict);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace skytrain::daemon
