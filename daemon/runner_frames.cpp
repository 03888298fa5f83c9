// PipelineRunner's frame I/O (pipeline_runner.h): activations, gradients and gradient norms
// to and from the neighbouring stages, checked against what this stage expects.
#include <torch/torch.h>

#include <utility>

#include "compression/codec_registry.h"
#include "compression/side_tokens.h"
#include "daemon/pipeline_runner.h"
#include "daemon/timing.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

using compression::FrameDirection;

std::string describeShape(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

at::Tensor PipelineRunner::exchangeNorms(uint64_t step, const at::Tensor& mine) {
  compression::Codec& plain = decoderFor("none");
  at::Tensor all = mine;
  if (!isLast()) {
    compression::TensorFrame frame = awaitFrame(*next_, FrameDirection::NormUp, step, 0);
    const auto& shape = frame.tensor.shape;
    if (shape.size() != 1 || shape[0] > (1 << 20) || frame.tensor.dtype != compression::WireDType::Float32) {
      throw WireError("norm frame of step " + std::to_string(step) + " carries shape " + describeShape(shape) +
                      ", expected float32 [k]");
    }
    all = torch::cat({mine, plain.decode(frame.tensor)});
  }
  at::Tensor total;
  if (isFirst()) {
    Timed timed(computeSeconds_);
    total = all.numel() == 1 ? all[0] : all.norm(2.0);
  } else {
    transmit(*previous_, plain, FrameDirection::NormUp, step, 0, stage_ - 1, all);
    total = receiveNormTotal(step);
  }
  if (!isLast()) transmit(*next_, plain, FrameDirection::NormDown, step, 0, stage_ + 1, total);
  return total;
}

at::Tensor PipelineRunner::receiveNormTotal(uint64_t step) {
  at::Tensor total = receive(*previous_, FrameDirection::NormDown, step, 0, {});
  // A norm is never negative: a negative one would turn clipping into a sign flip. NaN and
  // Inf go on to the job's on_nonfinite policy like a norm computed here.
  if (const double value = total.item<double>(); value < 0) {
    throw WireError("stage " + std::to_string(stage_ - 1) + " sent a negative gradient norm (" + std::to_string(value) +
                    ") for step " + std::to_string(step));
  }
  return total;
}

compression::TensorFrame PipelineRunner::awaitFrame(PeerLink& link, FrameDirection direction, uint64_t step,
                                                    int microBatch) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(spec_.peerTimeoutS);
  const int from = compression::travelsUpstream(direction) ? stage_ + 1 : stage_ - 1;
  if (auto it = stashedNorms_.find({static_cast<int>(direction), step}); it != stashedNorms_.end()) {
    compression::TensorFrame frame = std::move(it->second);
    stashedNorms_.erase(it);
    return frame;
  }
  // ZB-H1: while the frame has not arrived, pending W passes fill the wait.
  std::optional<compression::TensorFrame> early;
  while (!pendingWeights_.empty() && !(early = link.recv(std::chrono::milliseconds(0)))) runWeightPass();
  while (true) {
    if (aborted_()) throw Aborted{};
    auto frame = early ? std::exchange(early, std::nullopt) : link.recv(std::chrono::milliseconds(50));
    if (!frame) {
      if (Clock::now() > deadline) {
        throw PeerError("no " + compression::toString(direction) + " frame of step " + std::to_string(step) +
                        " micro-batch " + std::to_string(microBatch) + " from stage " + std::to_string(from) +
                        " within " + std::to_string(spec_.peerTimeoutS) + " s");
      }
      continue;
    }
    const bool wanted = frame->direction == direction && frame->step == step &&
                        frame->microBatch == static_cast<uint32_t>(microBatch);
    constexpr size_t kMaxStashedNorms = 4;  // the delayed update has at most two gradients pending
    if (!wanted && delayed_ && frame->direction == FrameDirection::NormDown && frame->microBatch == 0 &&
        stashedNorms_.size() < kMaxStashedNorms &&
        stashedNorms_.emplace(std::make_pair(static_cast<int>(FrameDirection::NormDown), frame->step), std::move(*frame))
            .second) {
      continue;
    }
    if (!wanted) {
      throw WireError("stage " + std::to_string(from) + " sent " + compression::toString(frame->direction) +
                      " frame step " + std::to_string(frame->step) + " micro-batch " +
                      std::to_string(frame->microBatch) + " while " + compression::toString(direction) +
                      " step " + std::to_string(step) + " micro-batch " + std::to_string(microBatch) +
                      " was expected");
    }
    return std::move(*frame);
  }
}

at::Tensor PipelineRunner::receive(PeerLink& link, FrameDirection direction, uint64_t step, int microBatch,
                                   const std::vector<int64_t>& expectedShape, const at::Tensor& tokens) {
  compression::TensorFrame frame = awaitFrame(link, direction, step, microBatch);
  // Checked before decoding, so a decoder never allocates more than this stage expects.
  if (frame.tensor.shape != expectedShape || frame.tensor.dtype != compression::WireDType::Float32) {
    throw WireError(compression::toString(direction) + " frame of step " + std::to_string(step) + " micro-batch " +
                    std::to_string(microBatch) + " carries shape " + describeShape(frame.tensor.shape) +
                    ", this stage expects float32 " + describeShape(expectedShape));
  }
  Timed timed(computeSeconds_);
  compression::Codec& decoder = streamDecoder(direction, frame.tensor.codec);
  if (auto* conditioned = compression::tokenConditioned(decoder)) {
    if (!tokens.defined()) {
      throw WireError(compression::toString(direction) + " frame of step " + std::to_string(step) + " uses codec \"" +
                      frame.tensor.codec + "\", which needs token IDs this stage does not hold");
    }
    conditioned->setTokens(tokens.to(at::kCPU));
  }
  return decoder.decode(frame.tensor).to(device_);
}

compression::TensorFrame PipelineRunner::frameFor(FrameDirection direction, uint64_t step, int microBatch,
                                                  uint16_t toStage) const {
  compression::TensorFrame frame;
  frame.job = jobKey_;
  frame.step = step;
  frame.microBatch = static_cast<uint32_t>(microBatch);
  frame.stage = toStage;
  frame.direction = direction;
  return frame;
}

void PipelineRunner::transmit(PeerLink& link, compression::Codec& codec, FrameDirection direction, uint64_t step,
                              int microBatch, uint16_t toStage, const at::Tensor& tensor, const at::Tensor& tokens) {
  compression::TensorFrame frame = frameFor(direction, step, microBatch, toStage);
  {
    Timed timed(computeSeconds_);
    if (auto* conditioned = compression::tokenConditioned(codec)) {
      if (!tokens.defined()) throw Error("codec \"" + codec.spec() + "\" needs token IDs this stage does not hold");
      conditioned->setTokens(tokens.to(at::kCPU));
    }
    frame.tensor = codec.encode(tensor.device().is_cpu() ? tensor : tensor.to(at::kCPU));
  }
  const auto raw = static_cast<uint64_t>(tensor.numel() * tensor.element_size());
  bytesRaw_ += raw;
  if (compression::travelsUpstream(direction)) rawBackward_ += raw;
  link.send(frame);
}

compression::Codec& PipelineRunner::streamDecoder(FrameDirection direction, const std::string& spec) {
  const std::string key = compression::toString(direction) + "/" + spec;
  if (auto it = streamDecoders_.find(key); it != streamDecoders_.end()) return *it->second;
  // Each spec a peer names costs a decoder: a job uses a handful, so more is a bad peer.
  if (streamDecoders_.size() >= kMaxDecoderStreams) {
    throw WireError("frames name more than " + std::to_string(kMaxDecoderStreams) + " codec streams");
  }
  std::unique_ptr<compression::Codec> codec;
  try {
    codec = compression::builtinCodecs().make(spec);  // a spec it refuses leaves no entry behind
  } catch (const Error& e) {  // the peer named it: a malformed frame, not this stage's fault
    throw WireError(compression::toString(direction) + " frame names codec \"" + spec + "\": " + e.what());
  }
  return *(streamDecoders_[key] = std::move(codec));
}

compression::Codec& PipelineRunner::decoderFor(const std::string& spec) {
  auto& codec = decoders_[spec];
  if (!codec) codec = compression::builtinCodecs().make(spec);
  return *codec;
}

}  // namespace skytrain::daemon
