// PipelineRunner on a fan-in (pipeline_runner.h): ELECTRA's generators (producers) feed the
// discriminator (the consumer) token IDs and replaced flags; nothing flows back but an
// acknowledgement per step, which bounds how far a producer runs ahead (max_staleness).
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>


#include "compression/codec_registry.h"
#include "daemon/pipeline_runner.h"
#include "daemon/timing.h"
#include "scheduler/error.h"
#include "stages/electra.h"

namespace skytrain::daemon {
namespace {

using compression::FrameDirection;

constexpr uint32_t kProducerShift = 16;  // a producer's index, in a micro-batch index's high bits

uint32_t tagged(int producer, uint32_t index) { return (static_cast<uint32_t>(producer) << kProducerShift) | index; }

// Validation draws its masks from their own stream, the same at every evaluation.
constexpr uint64_t kEvalStream = ~uint64_t{0};

}  // namespace

void PipelineRunner::waitForCredit(uint64_t step) {
  const auto s = static_cast<int64_t>(step);
  if (acked_ == kNoAck) acked_ = s - 1;  // the first step this attempt runs: the consumer finished the one before
  const auto deadline = Clock::now() + std::chrono::duration<double>(spec_.peerTimeoutS);
  while (true) {
    // Take every acknowledgement that has arrived; wait only when too far ahead.
    const bool ahead = acked_ < s - 1 - spec_.maxStaleness;
    if (aborted_()) throw Aborted{};
    auto frame = next_->recv(std::chrono::milliseconds(ahead ? 50 : 0));
    if (frame) {
      if (frame->direction != FrameDirection::Ack || static_cast<int64_t>(frame->step) >= s) {
        throw WireError("the consumer sent " + compression::toString(frame->direction) + " frame step " +
                        std::to_string(frame->step) + " while producer step " + std::to_string(step) + " waits for acks");
      }
      acked_ = std::max(acked_, static_cast<int64_t>(frame->step));
      continue;
    }
    if (!ahead) break;
    if (Clock::now() > deadline) {
      throw PeerError("no acknowledgement of step " + std::to_string(s - 1 - spec_.maxStaleness) +
                      " from the consumer within " + std::to_string(spec_.peerTimeoutS) + " s");
    }
  }
  lead_ = static_cast<int>(s - 1 - acked_);
}

void PipelineRunner::acknowledge(uint64_t step) {
  for (int p = 0; p < producers(); ++p) {
    compression::TensorFrame ack = frameFor(FrameDirection::Ack, step, 0, static_cast<uint16_t>(p));
    ack.tensor = decoderFor("none").encode(torch::zeros({0}));
    producerLinks_[p]->send(ack);
  }
}

void PipelineRunner::producerStep(uint64_t step, double& lossSum) {
  const int m = schedule_.microBatches, b = spec_.batchSize / m;
  const int64_t vocab = data_->tokenizer().vocabSize();
  for (int j = 0; j < m; ++j) {
    at::Tensor tokens;
    {
      Timed timed(computeSeconds_);
      const stages::TokenBatch batch = data_->trainBatch(step, j * b, b);
      const stages::MaskedTokens masked =
          stages::maskTokens(batch.inputs, spec_.seed, step, j * b, maskId_, vocab, spec_.model.maskRate);
      at::Tensor logits = model_->forward(j, masked.inputs).requires_grad_(true);
      const at::Tensor loss = model_->loss(logits, masked.targets);
      (loss / m).backward();
      const double value = loss.item<double>();
      if (!std::isfinite(value) && spec_.optimizer.onNonfinite == "fail") {
        throw Error(std::string(kNonFinite) + "the generator loss of step " + std::to_string(step) + " micro-batch " +
                    std::to_string(j) + " is " + std::to_string(value) + " (stage " + std::to_string(stage_) + ")");
      }
      lossSum += value;
      model_->backward(j, logits.grad());
      tokens = stages::replaceTokens(batch.inputs, logits, masked.targets, spec_.seed, step, j * b, vocab);
    }
    transmit(*next_, *codecs_->forward, FrameDirection::Forward, step, static_cast<int>(tagged(stage_, j)),
             consumerStage(), tokens);
  }
}

at::Tensor PipelineRunner::receiveTokens(FrameDirection direction, uint64_t step, uint32_t microBatch, int64_t samples) {
  compression::TensorFrame frame = takeProducerFrame(direction, step, microBatch);
  const std::vector<int64_t> expected = source_->inputShape(stage_, samples);
  if (frame.tensor.shape != expected || frame.tensor.dtype != compression::WireDType::Int64) {
    throw WireError(compression::toString(direction) + " frame of step " + std::to_string(step) + " from producer " +
                    std::to_string(microBatch >> kProducerShift) + " carries shape " + c10::str(frame.tensor.shape) +
                    ", the consumer expects int64 " + c10::str(expected));
  }
  Timed timed(computeSeconds_);
  return decoderFor(frame.tensor.codec).decode(frame.tensor);
}

void PipelineRunner::consumerStep(uint64_t step, double& lossSum) {
  const int m = schedule_.microBatches, b = spec_.batchSize / m, terms = m * producers();
  for (int p = 0; p < producers(); ++p) {
    for (int j = 0; j < m; ++j) {
      const at::Tensor tokens = receiveTokens(FrameDirection::Forward, step, tagged(p, j), b);
      Timed timed(computeSeconds_);
      const int index = p * m + j;
      at::Tensor logits = model_->forward(index, tokens.select(-1, 0)).requires_grad_(true);
      const at::Tensor loss = model_->loss(logits, tokens.select(-1, 1));
      (loss / terms).backward();
      const double value = loss.item<double>();
      if (!std::isfinite(value) && spec_.optimizer.onNonfinite == "fail") {
        throw Error(std::string(kNonFinite) + "the discriminator loss of step " + std::to_string(step) +
                    " on producer " + std::to_string(p) + " micro-batch " + std::to_string(j) + " is " +
                    std::to_string(value));
      }
      lossSum += value;
      model_->backward(index, logits.grad());
    }
  }
}

compression::TensorFrame PipelineRunner::takeProducerFrame(FrameDirection direction, uint64_t step, uint32_t microBatch) {
  const auto key = std::make_tuple(static_cast<int>(direction), step, microBatch);
  if (auto it = early_.find(key); it != early_.end()) {
    compression::TensorFrame frame = std::move(it->second);
    early_.erase(it);
    return frame;
  }
  // Producers run at most max_staleness steps ahead, and evaluate after a step: anything
  // further is a producer out of step (or a hostile one), refused before it piles up.
  const size_t cap = static_cast<size_t>(spec_.maxStaleness + 2) * producers() * spec_.batchSize +
                     static_cast<size_t>(producers()) * (spec_.eval.samples + 1);
  const auto deadline = Clock::now() + std::chrono::duration<double>(spec_.peerTimeoutS);
  while (true) {
    if (aborted_()) throw Aborted{};
    auto frame = producerLinks_.front()->recv(std::chrono::milliseconds(50));
    if (!frame) {
      if (Clock::now() > deadline) {
        throw PeerError("no " + compression::toString(direction) + " frame of step " + std::to_string(step) +
                        " micro-batch " + std::to_string(microBatch & 0xffff) + " from producer " +
                        std::to_string(microBatch >> kProducerShift) + " within " + std::to_string(spec_.peerTimeoutS) + " s");
      }
      continue;
    }
    if (frame->direction == direction && frame->step == step && frame->microBatch == microBatch) return std::move(*frame);
    const bool plausible = (frame->direction == FrameDirection::Forward || frame->direction == FrameDirection::Eval ||
                            frame->direction == FrameDirection::Probe) &&
                           frame->step >= step && frame->step <= step + spec_.maxStaleness + 1;
    if (!plausible || early_.size() >= cap) {
      throw WireError("producer " + std::to_string(frame->microBatch >> kProducerShift) + " sent a " +
                      compression::toString(frame->direction) + " frame of step " + std::to_string(frame->step) +
                      " while the consumer is at step " + std::to_string(step) + " (max_staleness " +
                      std::to_string(spec_.maxStaleness) + ")");
    }
    early_.emplace(std::make_tuple(static_cast<int>(frame->direction), frame->step, frame->microBatch), std::move(*frame));
  }
}

std::optional<double> PipelineRunner::fanInEval(uint64_t step) {
  const int b = spec_.batchSize / schedule_.microBatches, samples = spec_.eval.samples;
  double lossSum = 0;
  int64_t tokens = 0;
  for (int chunk = 0; chunk * b < samples; ++chunk) {
    const int count = std::min(b, samples - chunk * b);
    if (!isLast()) {
      const stages::TokenBatch batch = data_->validationBatch(chunk * b, count);
      const int64_t vocab = data_->tokenizer().vocabSize();
      const auto masked = stages::maskTokens(batch.inputs, spec_.seed, kEvalStream, chunk * b, maskId_, vocab, spec_.model.maskRate);
      const at::Tensor logits = model_->infer(masked.inputs);
      const at::Tensor corrupted =
          stages::replaceTokens(batch.inputs, logits, masked.targets, spec_.seed, kEvalStream, chunk * b, vocab);
      transmit(*next_, *evalCodec_, FrameDirection::Eval, step, static_cast<int>(tagged(stage_, chunk)), consumerStage(),
               corrupted);
      continue;
    }
    for (int p = 0; p < producers(); ++p) {
      const at::Tensor received = receiveTokens(FrameDirection::Eval, step, tagged(p, chunk), count);
      torch::NoGradGuard noGrad;
      const at::Tensor logits = model_->infer(received.select(-1, 0));
      lossSum += model_->loss(logits, received.select(-1, 1)).item<double>() * static_cast<double>(count * spec_.model.seqLen);
      tokens += count * spec_.model.seqLen;
    }
  }
  if (!isLast()) return std::nullopt;
  return lossSum / static_cast<double>(tokens);
}

nlohmann::json PipelineRunner::fanInProbes(uint64_t step) {
  auto frame = [&](FrameDirection direction, uint32_t index, uint16_t to, const at::Tensor& t) {
    compression::TensorFrame f = frameFor(direction, step, static_cast<int>(index), to);
    f.tensor = decoderFor("none").encode(t);
    return f;
  };
  const at::Tensor tiny = torch::zeros({1});
  if (isLast()) {  // echo every producer's probes, in whatever order they arrive
    for (int p = 0; p < producers(); ++p) {
      for (int i = 0; i < kProbeFrames; ++i) {
        takeProducerFrame(FrameDirection::Probe, step, tagged(p, i));
        producerLinks_[p]->send(frame(FrameDirection::ProbeReply, tagged(p, i), static_cast<uint16_t>(p), tiny));
      }
    }
    return nullptr;
  }
  // A full batch's token frame, padded to 64 KiB so the bandwidth term is measurable.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(0x11ec);
  const auto shape = source_->inputShape(consumerStage(), spec_.batchSize);
  const at::Tensor tokens = torch::cat({torch::randint(0, spec_.model.vocabSize, {shape[0], shape[1], 1}, generator, torch::kLong),
                                        torch::randint(0, 2, {shape[0], shape[1], 1}, generator, torch::kLong)}, -1);
  return measureLink(step, compression::builtinCodecs().make(spec_.compression.forward)->encode(tokens), 64 << 10,
                     consumerStage(), [this](int i) { return tagged(stage_, static_cast<uint32_t>(i)); });
}

}  // namespace skytrain::daemon
