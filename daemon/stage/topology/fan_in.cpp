#include "daemon/stage/topology/fan_in.h"

#include <spdlog/fmt/fmt.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "compression/codec_registry.h"
#include "daemon/ops/timing.h"
#include "daemon/protocol/failures.h"
#include "daemon/stage/runner/codec_set.h"
#include "daemon/stage/update/gradient_checks.h"
#include "daemon/stage/runner/profiler.h"
#include "daemon/stage/runner/schedule_executor.h"
#include "daemon/stage/runner/stage_links.h"
#include "scheduler/error.h"
#include "stages/models/model_source.h"
#include "stages/objective.h"

namespace skytrain::daemon {
namespace {

using compression::FrameDirection;
using Json = nlohmann::json;

constexpr uint32_t kProducerShift = 16;  // a producer's index, in a micro-batch index's high bits

uint32_t tagged(int producer, uint32_t index) { return (static_cast<uint32_t>(producer) << kProducerShift) | index; }

}  // namespace

FanIn::FanIn(const StageContext& context, StepCounters& counters, StageLinks& links, CodecSet& codecs,
             ScheduleExecutor& executor, Profiler& profiler, const stages::ModelSource& source, stages::Stage& model,
             const stages::DataSource* data, const stages::Objective& objective, torch::optim::Optimizer& optimizer)
    : context_(context),
      counters_(counters),
      links_(links),
      codecs_(codecs),
      executor_(executor),
      profiler_(profiler),
      source_(source),
      model_(model),
      data_(data),
      objective_(objective),
      optimizer_(optimizer) {}

int FanIn::producers() const { return context_.stages() - 1; }

uint16_t FanIn::consumerStage() const { return static_cast<uint16_t>(context_.stages() - 1); }

void FanIn::runOps(uint64_t step, double& lossSum) {
  if (context_.isLast()) {
    consumerStep(step, lossSum);
  } else {
    waitForCredit(step);
    producerStep(step, lossSum);
  }
}

int FanIn::lossTerms() const {
  return executor_.schedule().microBatches * (context_.isLast() ? producers() : 1);
}

nlohmann::json FanIn::profile(uint64_t step) {
  nlohmann::json compute = profileCompute();
  return {{"compute", std::move(compute)}, {"link", probeLinks(step)}};
}

void FanIn::waitForCredit(uint64_t step) {
  const auto s = static_cast<int64_t>(step);
  if (acked_ == kNoAck) acked_ = s - 1;  // the first step this attempt runs: the consumer finished the one before
  const auto deadline = Clock::now() + std::chrono::duration<double>(context_.spec.peerTimeoutS);
  while (true) {
    // Take every acknowledgement that has arrived; wait only when too far ahead.
    const bool ahead = acked_ < s - 1 - context_.spec.maxStaleness;
    context_.checkAborted();
    auto frame = links_.next().recv(std::chrono::milliseconds(ahead ? 50 : 0));
    if (frame) {
      if (frame->direction != FrameDirection::Ack || static_cast<int64_t>(frame->step) >= s) {
        throw WireError("the consumer sent " + compression::toString(frame->direction) + " frame step " +
                        std::to_string(frame->step + 1) + " while producer step " + std::to_string(step + 1) + " waits for acks");
      }
      acked_ = std::max(acked_, static_cast<int64_t>(frame->step));
      continue;
    }
    if (!ahead) break;
    links_.checkLinks();
    if (Clock::now() > deadline) {
      throw PeerError("no acknowledgement of step " + std::to_string(s - context_.spec.maxStaleness + 1) +
                      " from the consumer within " + fmt::format("{:g}", context_.spec.peerTimeoutS) + " s");
    }
  }
  lead_ = static_cast<int>(s - 1 - acked_);
}

void FanIn::endStep(uint64_t step) {
  if (!context_.isLast()) return;
  for (int p = 0; p < producers(); ++p) {
    compression::TensorFrame ack = links_.frameFor(FrameDirection::Ack, step, 0, static_cast<uint16_t>(p));
    ack.tensor = links_.decoderFor("none").encode(torch::zeros({0}));
    links_.producer(p).send(ack);
  }
}

void FanIn::producerStep(uint64_t step, double& lossSum) {
  const int m = executor_.schedule().microBatches, b = context_.spec.batchSize / m;
  for (int j = 0; j < m; ++j) {
    at::Tensor tokens;
    {
      Timed timed(counters_.computeSeconds);
      const stages::TokenBatch batch = data_->trainBatch(step, j * b, b);
      const stages::TokenBatch prepared = objective_.prepare(batch, step, j * b);
      at::Tensor logits = model_.forward(j, prepared.inputs).requires_grad_(true);
      const at::Tensor loss = model_.loss(logits, prepared.targets);
      (loss / m).backward();
      const double value = loss.item<double>();
      if (!std::isfinite(value) && context_.spec.optimizer.onNonfinite == "fail") {
        throw Error(std::string(protocol::kNonFinite) + "the generator loss of step " + std::to_string(step + 1) + " micro-batch " +
                    std::to_string(j) + " is " + std::to_string(value) + " (stage " + std::to_string(context_.stage) + ")");
      }
      lossSum += value;
      model_.backward(j, logits.grad());
      tokens = objective_.produce(batch, prepared, logits, step, j * b);
    }
    links_.transmit(links_.next(), *codecs_.forStep(step).forward, FrameDirection::Forward, step, static_cast<int>(tagged(context_.stage, j)),
             consumerStage(), tokens);
  }
}

at::Tensor FanIn::receiveTokens(FrameDirection direction, uint64_t step, uint32_t microBatch, int64_t samples) {
  compression::TensorFrame frame = takeProducerFrame(direction, step, microBatch);
  const std::vector<int64_t> expected = source_.inputShape(context_.stage, samples);
  if (frame.tensor.shape != expected || frame.tensor.dtype != compression::WireDType::Int64) {
    throw WireError(compression::toString(direction) + " frame of step " + std::to_string(step + 1) + " from producer " +
                    std::to_string(microBatch >> kProducerShift) + " carries shape " + c10::str(frame.tensor.shape) +
                    ", the consumer expects int64 " + c10::str(expected));
  }
  at::Tensor tokens;
  {
    Timed timed(counters_.computeSeconds);
    tokens = links_.decoderFor(frame.tensor.codec).decode(frame.tensor);
  }
  // IDs index the embedding and flags are targets: a producer's out-of-range value is its
  // malformed frame, named as such, not an indexing error deep in the model.
  const int64_t vocab = context_.spec.model.vocabSize;
  if (tokens.numel() == 0) return tokens;
  const auto [idMin, idMax] = torch::aminmax(tokens.select(-1, 0));
  const auto [flagMin, flagMax] = torch::aminmax(tokens.select(-1, 1));
  const int64_t lowId = idMin.item<int64_t>(), highId = idMax.item<int64_t>();
  const int64_t lowFlag = flagMin.item<int64_t>(), highFlag = flagMax.item<int64_t>();
  if (lowId < 0 || highId >= vocab || lowFlag < 0 || highFlag > 1) {
    throw WireError(compression::toString(direction) + " frame of step " + std::to_string(step + 1) + " from producer " +
                    std::to_string(microBatch >> kProducerShift) + " carries token IDs in [" + std::to_string(lowId) +
                    ", " + std::to_string(highId) + "] and flags in [" + std::to_string(lowFlag) + ", " +
                    std::to_string(highFlag) + "]; the vocabulary is [0, " + std::to_string(vocab) +
                    ") and a flag is 0 or 1");
  }
  return tokens;
}

void FanIn::consumerStep(uint64_t step, double& lossSum) {
  const int m = executor_.schedule().microBatches, b = context_.spec.batchSize / m, terms = m * producers();
  for (int p = 0; p < producers(); ++p) {
    for (int j = 0; j < m; ++j) {
      const at::Tensor tokens = receiveTokens(FrameDirection::Forward, step, tagged(p, j), b);
      Timed timed(counters_.computeSeconds);
      const int index = p * m + j;
      const stages::TokenBatch batch = objective_.consume(tokens);
      at::Tensor logits = model_.forward(index, batch.inputs).requires_grad_(true);
      const at::Tensor loss = model_.loss(logits, batch.targets);
      (loss / terms).backward();
      const double value = loss.item<double>();
      if (!std::isfinite(value) && context_.spec.optimizer.onNonfinite == "fail") {
        throw Error(std::string(protocol::kNonFinite) + "the discriminator loss of step " + std::to_string(step + 1) +
                    " on producer " + std::to_string(p) + " micro-batch " + std::to_string(j) + " is " +
                    std::to_string(value));
      }
      lossSum += value;
      model_.backward(index, logits.grad());
    }
  }
}

compression::TensorFrame FanIn::takeProducerFrame(FrameDirection direction, uint64_t step, uint32_t microBatch) {
  const auto key = std::make_tuple(static_cast<int>(direction), step, microBatch);
  if (auto it = early_.find(key); it != early_.end()) {
    compression::TensorFrame frame = std::move(it->second);
    early_.erase(it);
    return frame;
  }
  // Producers run at most max_staleness steps ahead, and evaluate after a step: anything
  // further is a producer out of step (or a hostile one), refused before it piles up.
  const size_t cap = static_cast<size_t>(context_.spec.maxStaleness + 2) * producers() * context_.spec.batchSize +
                     static_cast<size_t>(producers()) * (context_.spec.eval.samples + 1);
  const auto deadline = Clock::now() + std::chrono::duration<double>(context_.spec.peerTimeoutS);
  while (true) {
    context_.checkAborted();
    auto frame = links_.producer(0).recv(std::chrono::milliseconds(50));
    if (!frame) {
      links_.checkLinks();
      if (Clock::now() > deadline) {
        throw PeerError("no " + compression::toString(direction) + " frame of step " + std::to_string(step + 1) +
                        " micro-batch " + std::to_string(microBatch & 0xffff) + " from producer " +
                        std::to_string(microBatch >> kProducerShift) + " within " + fmt::format("{:g}", context_.spec.peerTimeoutS) + " s");
      }
      continue;
    }
    if (frame->direction == direction && frame->step == step && frame->microBatch == microBatch) return std::move(*frame);
    const bool plausible = (frame->direction == FrameDirection::Forward || frame->direction == FrameDirection::Eval ||
                            frame->direction == FrameDirection::Probe) &&
                           frame->step >= step && frame->step <= step + context_.spec.maxStaleness + 1;
    if (!plausible || early_.size() >= cap) {
      throw WireError("producer " + std::to_string(frame->microBatch >> kProducerShift) + " sent a " +
                      compression::toString(frame->direction) + " frame of step " + std::to_string(frame->step + 1) +
                      " while the consumer is at step " + std::to_string(step + 1) + " (max_staleness " +
                      std::to_string(context_.spec.maxStaleness) + ")");
    }
    early_.emplace(std::make_tuple(static_cast<int>(frame->direction), frame->step, frame->microBatch), std::move(*frame));
  }
}

std::optional<double> FanIn::evaluate(uint64_t step) {
  const int b = context_.spec.batchSize / executor_.schedule().microBatches, samples = context_.spec.eval.samples;
  double lossSum = 0;
  int64_t tokens = 0;
  for (int chunk = 0; chunk * b < samples; ++chunk) {
    const int count = std::min(b, samples - chunk * b);
    if (!context_.isLast()) {
      const stages::TokenBatch batch = data_->validationBatch(chunk * b, count);
      const stages::TokenBatch prepared = objective_.prepare(batch, stages::kValidationStream, chunk * b);
      const at::Tensor logits = model_.infer(prepared.inputs);
      const at::Tensor corrupted = objective_.produce(batch, prepared, logits, stages::kValidationStream, chunk * b);
      links_.transmit(links_.next(), codecs_.eval(), FrameDirection::Eval, step, static_cast<int>(tagged(context_.stage, chunk)), consumerStage(),
               corrupted);
      continue;
    }
    for (int p = 0; p < producers(); ++p) {
      const stages::TokenBatch received = objective_.consume(receiveTokens(FrameDirection::Eval, step, tagged(p, chunk), count));
      torch::NoGradGuard noGrad;
      const at::Tensor logits = model_.infer(received.inputs);
      lossSum += model_.loss(logits, received.targets).item<double>() * static_cast<double>(count * context_.spec.model.seqLen);
      tokens += count * context_.spec.model.seqLen;
    }
  }
  if (!context_.isLast()) return std::nullopt;
  return lossSum / static_cast<double>(tokens);
}

nlohmann::json FanIn::probeLinks(uint64_t step) {
  auto frame = [&](FrameDirection direction, uint32_t index, uint16_t to, const at::Tensor& t) {
    compression::TensorFrame f = links_.frameFor(direction, step, static_cast<int>(index), to);
    f.tensor = links_.decoderFor("none").encode(t);
    return f;
  };
  const at::Tensor tiny = torch::zeros({1});
  if (context_.isLast()) {  // echo every producer's probes, in whatever order they arrive
    for (int p = 0; p < producers(); ++p) {
      for (int i = 0; i < Profiler::kProbeFrames; ++i) {
        takeProducerFrame(FrameDirection::Probe, step, tagged(p, i));
        links_.producer(p).send(frame(FrameDirection::ProbeReply, tagged(p, i), static_cast<uint16_t>(p), tiny));
      }
    }
    return nullptr;
  }
  // A full batch's token frame, padded to 64 KiB so the bandwidth term is measurable.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(0x11ec);
  const auto shape = source_.inputShape(consumerStage(), context_.spec.batchSize);
  const at::Tensor tokens = torch::cat({torch::randint(0, context_.spec.model.vocabSize, {shape[0], shape[1], 1}, generator, torch::kLong),
                                        torch::randint(0, 2, {shape[0], shape[1], 1}, generator, torch::kLong)}, -1);
  return profiler_.measureLink(step, compression::builtinCodecs().make(context_.spec.compression.forward)->encode(tokens), 64 << 10,
                     consumerStage(), [this](int i) { return tagged(context_.stage, static_cast<uint32_t>(i)); });
}

nlohmann::json FanIn::profileCompute() {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(0x9f0f11e);
  auto codec = compression::builtinCodecs().make(context_.spec.compression.forward);
  const int64_t t = context_.spec.model.seqLen, vocab = context_.spec.model.vocabSize;
  Json forward = Json::array(), backward = Json::array(), outputBytes = Json::array(), gradientBytes = Json::array();
  constexpr int kProfileMicroBatch = -1;
  auto pass = [&](int64_t b, double& forwardSeconds, double& backwardSeconds) {
    const at::Tensor ids = torch::randint(0, vocab, {b, t}, generator, torch::kLong);
    auto start = Clock::now();
    at::Tensor logits = model_.forward(kProfileMicroBatch, ids).requires_grad_(true);
    const at::Tensor targets = torch::randint(0, context_.isLast() ? 2 : vocab, {b, t}, generator, torch::kLong);
    model_.loss(logits, targets).backward();
    forwardSeconds = secondsSince(start);
    start = Clock::now();
    model_.backward(kProfileMicroBatch, logits.grad());
    backwardSeconds = secondsSince(start);
  };
  double f = 0, w = 0;
  pass(context_.spec.batchSize, f, w);  // warm-up
  for (int64_t b : profileSizes(context_.spec.batchSize)) {
    std::vector<double> forwardTimes, backwardTimes;
    pass(b, f, w);  // untimed, as above
    for (int repeat = 0; repeat < kProfileRepeats; ++repeat) {
      pass(b, f, w);
      forwardTimes.push_back(f);
      backwardTimes.push_back(w);
    }
    forward.push_back({b, fastest(forwardTimes)});
    backward.push_back({b, fastest(backwardTimes)});
    double bytes = 0;
    if (!context_.isLast()) {
      const at::Tensor tokens = torch::stack({torch::randint(0, vocab, {b, t}, generator, torch::kLong),
                                              torch::randint(0, 2, {b, t}, generator, torch::kLong)}, -1);
      bytes = static_cast<double>(compression::frameBytes(codec->encode(tokens)));
    }
    outputBytes.push_back({b, bytes});
    gradientBytes.push_back({b, 0.0});
  }
  zeroGradients(model_.parameters());
  return profiler_.computeProfile(std::move(forward), std::move(backward), std::move(outputBytes), std::move(gradientBytes));
}

}  // namespace skytrain::daemon
