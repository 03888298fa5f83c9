// StageLinks: a stage's frames in and out — the links to its neighbours (or a fan-in
// consumer's links to its producers), each frame checked to be the one the schedule waits
// for and to carry the shape this stage expects before anything is decoded, the decoders
// of each stream, and the bytes sent.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compression/codec.h"
#include "compression/wire/tensor_frame.h"
#include "daemon/net/peer_link.h"
#include "daemon/stage/runner/stage_context.h"

namespace skytrain::daemon {

class SnapshotReader;

// "[2, 128, 64]": a frame's shape in an error message.
std::string describeShape(const std::vector<int64_t>& shape);

class StageLinks {
 public:
  StageLinks(const StageContext& context, StepCounters& counters);

  // Links to the neighbours; null at the pipeline's ends (a fan-in producer: only next).
  void connect(std::unique_ptr<PeerLink> previous, std::unique_ptr<PeerLink> next, bool fanIn);
  // A fan-in's consumer: a link to each producer, in stage order; their frames arrive in
  // one queue (the first link's).
  void connectProducers(std::vector<std::unique_ptr<PeerLink>> producers, int expected);
  PeerLink& previous() { return *previous_; }
  PeerLink& next() { return *next_; }
  bool hasPrevious() const { return previous_ != nullptr; }
  bool hasNext() const { return next_ != nullptr; }
  PeerLink& producer(int index) { return *producers_.at(static_cast<size_t>(index)); }

  // Work to do while a frame has not arrived (ZB-H1's pending W passes): `pending` says
  // whether there is any, `run` does one piece.
  void setIdleWork(std::function<bool()> pending, std::function<void()> run);
  // The delayed update: a gradient-norm frame going down may arrive among a later step's
  // frames; a few wait here until their gradient is applied.
  void setStashNorms(bool on) { stashNorms_ = on; }

  // Throws PeerError naming the link when one of this stage's outgoing data connections has
  // failed (PeerLink::failure: refused, dropped by a partition, never made).
  void checkLinks();
  // The next frame of (direction, step, micro-batch) from `link`; any other frame is a
  // WireError, none within peer_timeout_s a PeerError, as is a failed data connection
  // (checkLinks); throws Aborted when told to stop.
  compression::TensorFrame awaitFrame(PeerLink& link, compression::FrameDirection direction, uint64_t step,
                                      int microBatch);
  // awaitFrame's frame, checked to carry expectedShape (float32) before it is decoded by its
  // stream's decoder; `tokens`, where this stage holds them, are the micro-batch's token IDs
  // for a codec that predicts from them (compression/side_tokens.h).
  at::Tensor receive(PeerLink& link, compression::FrameDirection direction, uint64_t step, int microBatch,
                     const std::vector<int64_t>& expectedShape, const at::Tensor& tokens = at::Tensor());
  // Encodes `tensor` with `codec` (timed as compute) and sends it to stage `toStage`.
  void transmit(PeerLink& link, compression::Codec& codec, compression::FrameDirection direction, uint64_t step,
                int microBatch, uint16_t toStage, const at::Tensor& tensor, const at::Tensor& tokens = at::Tensor());
  // A frame's header fields, addressed to `toStage`; the caller fills in the tensor.
  compression::TensorFrame frameFor(compression::FrameDirection direction, uint64_t step, int microBatch,
                                    uint16_t toStage) const;

  // The uncompressed codec, for norms, probes and acknowledgements.
  compression::Codec& plain() { return decoderFor("none"); }
  // A stateless decoder of `spec` (token frames), made once.
  compression::Codec& decoderFor(const std::string& spec);
  // The decoder of one stream (a direction's frames): a stateful decoder ("+pred") must see
  // exactly the messages its encoder saw, in their order. A spec the registry refuses is a
  // WireError: the peer named it.
  compression::Codec& streamDecoder(compression::FrameDirection direction, const std::string& spec);
  // The stream decoders' state as "decoder/<direction>/<spec>/<name>" tensors, and its
  // restoration: every stream decoder is replaced (a stream absent starts afresh).
  void saveDecoders(std::vector<std::pair<std::string, at::Tensor>>& out) const;
  void restoreDecoders(SnapshotReader& snapshot);

  // Bytes handed to the network so far: all links, and those to the previous stage.
  uint64_t bytesSent() const;
  uint64_t bytesSentBackward() const { return previous_ ? previous_->bytesSent() : 0; }

 private:
  static constexpr size_t kMaxDecoderStreams = 64;  // a job uses a handful: more is a bad peer
  static constexpr size_t kMaxStashedNorms = 4;     // the delayed update has at most two gradients pending

  const StageContext& context_;
  StepCounters& counters_;
  std::unique_ptr<PeerLink> previous_;
  std::unique_ptr<PeerLink> next_;
  std::vector<std::unique_ptr<PeerLink>> producers_;  // a fan-in consumer's: acknowledgements out
  std::function<bool()> idlePending_;
  std::function<void()> idleRun_;
  bool stashNorms_ = false;
  std::map<std::pair<int, uint64_t>, compression::TensorFrame> stashedNorms_;  // (direction, step)
  std::map<std::string, std::unique_ptr<compression::Codec>> decoders_;
  std::map<std::string, std::unique_ptr<compression::Codec>> streamDecoders_;  // "<direction>/<spec>"
};

}  // namespace skytrain::daemon
