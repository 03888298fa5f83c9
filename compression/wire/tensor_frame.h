// TensorFrame: the wire format of activations and gradients between stage daemons.
//
// A frame travels as two ZeroMQ message parts: the header below, then the codec payload.
// All integers are little-endian.
//
//   offset size  field
//        0    4  magic "SKTF"
//        4    2  version (kFrameVersion); any other version is refused
//        6    1  direction (FrameDirection)
//        7    1  dtype of the decoded tensor (WireDType)
//        8    8  job id
//       16    8  step
//       24    4  micro-batch index
//       28    2  destination stage index
//       30    1  ndim (at most kMaxFrameDims)
//       31    1  codec spec length L (1..kMaxCodecSpec)
//       32    8  payload length (bytes of part two)
//       40    8  checksum: XXH64 (seed 0) of header bytes 0..39, the shape, the codec spec
//                and the payload
//       48  8*n  shape (int64 each)
//  48+8*n    L  codec spec (ASCII, e.g. "none")
//
// decodeFrame checks every field before it trusts it, so a truncated, oversized or
// corrupted frame is refused with skytrain::WireError and never read out of bounds.
#pragma once

#include <cstdint>
#include <string>

#include "compression/wire/encoded_tensor.h"

namespace skytrain::compression {

constexpr uint32_t kFrameMagic = 0x46544B53;  // "SKTF" read little-endian
constexpr uint16_t kFrameVersion = 1;
constexpr size_t kFrameFixedHeader = 48;
constexpr size_t kMaxFrameDims = 8;
constexpr size_t kMaxCodecSpec = 64;

enum class FrameDirection : uint8_t {
  Forward = 0,   // activations, stage s -> s+1
  Backward = 1,  // activation gradients, stage s+1 -> s
  Eval = 2,      // validation activations (forward, no backward follows)
  Probe = 3,     // link profiling, stage s -> s+1
  ProbeReply = 4,  // its echo, stage s+1 -> s
  NormUp = 5,      // gradient norms of stages > s, stage s+1 -> s (global-norm clipping)
  NormDown = 6,    // the global gradient norm, stage s -> s+1
  Ack = 7,         // a fan-in's consumer finished this step, consumer -> each producer
  TiedDown = 8,    // a tied matrix's gradient on its way from the first holder to the second, s -> s+1
  TiedUp = 9,      // the sum of both holders' gradients on its way back, s+1 -> s
};

// Job key 0 is no job's: a Probe frame for it is answered at once by the receiving daemon's
// data thread with a one-float ProbeReply (same step and micro-batch), so that `skytrain
// probe` measures a link through the data port as the planner does.
constexpr uint64_t kLinkProbeJob = 0;

// Frames that travel upstream (s+1 -> s) arrive in the receiver's from-next queue.
inline bool travelsUpstream(FrameDirection d) {
  return d == FrameDirection::Backward || d == FrameDirection::ProbeReply || d == FrameDirection::NormUp ||
         d == FrameDirection::Ack || d == FrameDirection::TiedUp;
}

struct TensorFrame {
  uint64_t job = 0;
  uint64_t step = 0;
  uint32_t microBatch = 0;
  uint16_t stage = 0;  // the stage the frame is addressed to
  FrameDirection direction = FrameDirection::Forward;
  EncodedTensor tensor;
};

// Bytes of a header for a tensor of `dims` dimensions and a codec spec of `codecLength`.
constexpr size_t frameHeaderBytes(size_t dims, size_t codecLength) { return kFrameFixedHeader + 8 * dims + codecLength; }

// Bytes a frame carrying `tensor` takes on the wire: header and payload.
inline size_t frameBytes(const EncodedTensor& tensor) {
  return frameHeaderBytes(tensor.shape.size(), tensor.codec.size()) + tensor.payload.size();
}

// Part one of the frame (the header); part two is frame.tensor.payload as it is.
std::string encodeFrameHeader(const TensorFrame& frame);

// Rebuilds a frame from its two parts; takes ownership of the payload.
TensorFrame decodeFrame(const void* header, size_t headerSize, std::string payload);

std::string toString(FrameDirection direction);

}  // namespace skytrain::compression
