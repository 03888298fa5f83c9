#include "daemon/stage/runner/stage_links.h"

#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <optional>
#include <utility>

#include "compression/codec_registry.h"
#include "compression/side_tokens.h"
#include "daemon/stage/state/snapshot_reader.h"
#include "daemon/ops/timing.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

using compression::FrameDirection;

std::string describeShape(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

StageLinks::StageLinks(const StageContext& context, StepCounters& counters) : context_(context), counters_(counters) {}

void StageLinks::connect(std::unique_ptr<PeerLink> previous, std::unique_ptr<PeerLink> next, bool fanIn) {
  const int stage = context_.stage;
  if (fanIn) {
    SKYTRAIN_CHECK(!previous && next && !context_.isLast(), "links do not match fan-in producer " << stage);
  } else {
    SKYTRAIN_CHECK(context_.isFirst() == !previous && context_.isLast() == !next, "links do not match stage " << stage);
  }
  previous_ = std::move(previous);
  next_ = std::move(next);
}

void StageLinks::connectProducers(std::vector<std::unique_ptr<PeerLink>> producers, int expected) {
  SKYTRAIN_CHECK(context_.isLast() && static_cast<int>(producers.size()) == expected,
                 "producer links do not match stage " << context_.stage);
  producers_ = std::move(producers);
}

void StageLinks::setIdleWork(std::function<bool()> pending, std::function<void()> run) {
  idlePending_ = std::move(pending);
  idleRun_ = std::move(run);
}

uint64_t StageLinks::bytesSent() const {
  uint64_t sent = (previous_ ? previous_->bytesSent() : 0) + (next_ ? next_->bytesSent() : 0);
  for (const auto& link : producers_) sent += link->bytesSent();
  return sent;
}

void StageLinks::checkLinks() {
  context_.checkAborted();  // a link dropped by an abort is the abort's, not a failure
  auto check = [&](PeerLink* link, const std::string& which) {
    if (!link) return;
    if (auto why = link->failure()) throw PeerError("data link to " + which + ": " + *why);
  };
  check(previous_.get(), "stage " + std::to_string(context_.stage - 1));
  check(next_.get(), "stage " + std::to_string(context_.stage + 1));
  for (size_t i = 0; i < producers_.size(); ++i) check(producers_[i].get(), "producer " + std::to_string(i));
}

compression::TensorFrame StageLinks::awaitFrame(PeerLink& link, FrameDirection direction, uint64_t step,
                                                int microBatch) {
  const double timeoutS = context_.spec.peerTimeoutS;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeoutS);
  const int from = compression::travelsUpstream(direction) ? context_.stage + 1 : context_.stage - 1;
  if (auto it = stashedNorms_.find({static_cast<int>(direction), step}); it != stashedNorms_.end()) {
    compression::TensorFrame frame = std::move(it->second);
    stashedNorms_.erase(it);
    return frame;
  }
  // While the frame has not arrived, pending work (ZB-H1's W passes) fills the wait.
  std::optional<compression::TensorFrame> early;
  while (idlePending_ && idlePending_() && !(early = link.recv(std::chrono::milliseconds(0)))) idleRun_();
  while (true) {
    context_.checkAborted();
    auto frame = early ? std::exchange(early, std::nullopt) : link.recv(std::chrono::milliseconds(50));
    if (!frame) {
      checkLinks();
      if (Clock::now() > deadline) {
        throw PeerError("no " + compression::toString(direction) + " frame of step " + std::to_string(step + 1) +
                        " micro-batch " + std::to_string(microBatch) + " from stage " + std::to_string(from) +
                        " within " + fmt::format("{:g}", timeoutS) + " s");
      }
      continue;
    }
    const bool wanted = frame->direction == direction && frame->step == step &&
                        frame->microBatch == static_cast<uint32_t>(microBatch);
    if (!wanted && stashNorms_ && frame->direction == FrameDirection::NormDown && frame->microBatch == 0 &&
        stashedNorms_.size() < kMaxStashedNorms &&
        stashedNorms_.emplace(std::make_pair(static_cast<int>(FrameDirection::NormDown), frame->step), std::move(*frame))
            .second) {
      continue;
    }
    if (!wanted) {
      throw WireError("stage " + std::to_string(from) + " sent " + compression::toString(frame->direction) +
                      " frame step " + std::to_string(frame->step + 1) + " micro-batch " +
                      std::to_string(frame->microBatch) + " while " + compression::toString(direction) +
                      " step " + std::to_string(step + 1) + " micro-batch " + std::to_string(microBatch) +
                      " was expected");
    }
    return std::move(*frame);
  }
}

at::Tensor StageLinks::receive(PeerLink& link, FrameDirection direction, uint64_t step, int microBatch,
                               const std::vector<int64_t>& expectedShape, const at::Tensor& tokens) {
  compression::TensorFrame frame = awaitFrame(link, direction, step, microBatch);
  // Checked before decoding, so a decoder never allocates more than this stage expects.
  if (frame.tensor.shape != expectedShape || frame.tensor.dtype != compression::WireDType::Float32) {
    throw WireError(compression::toString(direction) + " frame of step " + std::to_string(step + 1) + " micro-batch " +
                    std::to_string(microBatch) + " carries shape " + describeShape(frame.tensor.shape) +
                    ", this stage expects float32 " + describeShape(expectedShape));
  }
  Timed timed(counters_.computeSeconds);
  compression::Codec& decoder = streamDecoder(direction, frame.tensor.codec);
  if (auto* conditioned = compression::tokenConditioned(decoder)) {
    if (!tokens.defined()) {
      throw WireError(compression::toString(direction) + " frame of step " + std::to_string(step + 1) + " uses codec \"" +
                      frame.tensor.codec + "\", which needs token IDs this stage does not hold");
    }
    conditioned->setTokens(tokens.to(at::kCPU));
  }
  return decoder.decode(frame.tensor).to(context_.device);
}

compression::TensorFrame StageLinks::frameFor(FrameDirection direction, uint64_t step, int microBatch,
                                              uint16_t toStage) const {
  compression::TensorFrame frame;
  frame.job = context_.jobKey;
  frame.step = step;
  frame.microBatch = static_cast<uint32_t>(microBatch);
  frame.stage = toStage;
  frame.direction = direction;
  return frame;
}

void StageLinks::transmit(PeerLink& link, compression::Codec& codec, FrameDirection direction, uint64_t step,
                          int microBatch, uint16_t toStage, const at::Tensor& tensor, const at::Tensor& tokens) {
  compression::TensorFrame frame = frameFor(direction, step, microBatch, toStage);
  {
    Timed timed(counters_.computeSeconds);
    if (auto* conditioned = compression::tokenConditioned(codec)) {
      if (!tokens.defined()) throw Error("codec \"" + codec.spec() + "\" needs token IDs this stage does not hold");
      conditioned->setTokens(tokens.to(at::kCPU));
    }
    frame.tensor = codec.encode(tensor.device().is_cpu() ? tensor : tensor.to(at::kCPU));
  }
  const auto raw = static_cast<uint64_t>(tensor.numel() * tensor.element_size());
  counters_.bytesRaw += raw;
  if (compression::travelsUpstream(direction)) counters_.rawBackward += raw;
  link.send(frame);
}

compression::Codec& StageLinks::streamDecoder(FrameDirection direction, const std::string& spec) {
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

compression::Codec& StageLinks::decoderFor(const std::string& spec) {
  auto& codec = decoders_[spec];
  if (!codec) codec = compression::builtinCodecs().make(spec);
  return *codec;
}

void StageLinks::saveDecoders(std::vector<std::pair<std::string, at::Tensor>>& out) const {
  for (const auto& [stream, codec] : streamDecoders_) {
    for (const auto& [name, tensor] : codec->state()) out.emplace_back("decoder/" + stream + "/" + name, tensor.clone());
  }
}

void StageLinks::restoreDecoders(SnapshotReader& snapshot) {
  streamDecoders_.clear();
  const std::string& where = snapshot.where();
  std::map<std::string, compression::CodecState> states;  // by "<direction>/<spec>"
  for (const auto& [name, tensor] : snapshot.takeUnder("decoder/")) {
    const size_t direction = name.find('/');
    const size_t spec = direction == std::string::npos ? direction : name.find('/', direction + 1);
    if (spec == std::string::npos || spec + 1 >= name.size()) {
      throw WireError(where + ": bad decoder state name \"decoder/" + name + "\"");
    }
    states[name.substr(0, spec)].emplace_back(name.substr(spec + 1), tensor);
  }
  if (states.size() > kMaxDecoderStreams) {
    throw WireError(where + ": more than " + std::to_string(kMaxDecoderStreams) + " decoder streams");
  }
  for (auto& [stream, state] : states) {
    std::unique_ptr<compression::Codec> codec;
    try {
      codec = compression::builtinCodecs().make(stream.substr(stream.find('/') + 1));
    } catch (const Error& e) {
      throw WireError(where + ": decoder stream \"" + stream + "\": " + e.what());
    }
    codec->loadState(state);
    streamDecoders_[stream] = std::move(codec);
  }
}

}  // namespace skytrain::daemon
