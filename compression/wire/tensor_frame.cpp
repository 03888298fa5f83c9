#include "compression/wire/tensor_frame.h"

#include <xxhash.h>

#include <cstring>

#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

void put(std::string& out, size_t offset, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t get(const unsigned char* in, size_t offset, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(in[offset + i]) << (8 * i);
  return value;
}

// Checksum over everything but the checksum field itself.
uint64_t frameChecksum(const unsigned char* header, size_t headerSize, const std::string& payload) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  XXH64_update(state, header, 40);
  XXH64_update(state, header + kFrameFixedHeader, headerSize - kFrameFixedHeader);
  XXH64_update(state, payload.data(), payload.size());
  const uint64_t sum = XXH64_digest(state);
  XXH64_freeState(state);
  return sum;
}

bool validDirection(uint64_t d) { return d <= static_cast<uint64_t>(FrameDirection::TiedUp); }
bool validDType(uint64_t d) { return d >= 1 && d <= static_cast<uint64_t>(WireDType::UInt8); }

}  // namespace

std::string encodeFrameHeader(const TensorFrame& frame) {
  const auto& t = frame.tensor;
  if (t.shape.size() > kMaxFrameDims) {
    throw Error("frame: tensor has " + std::to_string(t.shape.size()) + " dims, at most " +
                std::to_string(kMaxFrameDims) + " fit a frame");
  }
  if (t.codec.empty() || t.codec.size() > kMaxCodecSpec) {
    throw Error("frame: codec spec \"" + t.codec + "\" must be 1.." +
                std::to_string(kMaxCodecSpec) + " characters");
  }
  std::string out(frameHeaderBytes(t.shape.size(), t.codec.size()), '\0');
  put(out, 0, kFrameMagic, 4);
  put(out, 4, kFrameVersion, 2);
  put(out, 6, static_cast<uint8_t>(frame.direction), 1);
  put(out, 7, static_cast<uint8_t>(t.dtype), 1);
  put(out, 8, frame.job, 8);
  put(out, 16, frame.step, 8);
  put(out, 24, frame.microBatch, 4);
  put(out, 28, frame.stage, 2);
  put(out, 30, t.shape.size(), 1);
  put(out, 31, t.codec.size(), 1);
  put(out, 32, t.payload.size(), 8);
  for (size_t i = 0; i < t.shape.size(); ++i) {
    put(out, kFrameFixedHeader + 8 * i, static_cast<uint64_t>(t.shape[i]), 8);
  }
  std::memcpy(out.data() + kFrameFixedHeader + 8 * t.shape.size(), t.codec.data(), t.codec.size());
  const auto* bytes = reinterpret_cast<const unsigned char*>(out.data());
  put(out, 40, frameChecksum(bytes, out.size(), t.payload), 8);
  return out;
}

TensorFrame decodeFrame(const void* header, size_t headerSize, std::string payload) {
  const auto* in = static_cast<const unsigned char*>(header);
  if (headerSize < kFrameFixedHeader) {
    throw WireError("frame header is " + std::to_string(headerSize) + " bytes, needs at least " +
                    std::to_string(kFrameFixedHeader));
  }
  if (get(in, 0, 4) != kFrameMagic) throw WireError("frame has a bad magic number");
  const uint64_t version = get(in, 4, 2);
  if (version != kFrameVersion) {
    throw WireError("frame version " + std::to_string(version) + " is not supported (expected " +
                    std::to_string(kFrameVersion) + ")");
  }
  const uint64_t direction = get(in, 6, 1), dtype = get(in, 7, 1);
  if (!validDirection(direction)) throw WireError("frame direction " + std::to_string(direction) + " is unknown");
  if (!validDType(dtype)) throw WireError("frame dtype " + std::to_string(dtype) + " is unknown");
  const size_t ndim = get(in, 30, 1), codecLength = get(in, 31, 1);
  if (ndim > kMaxFrameDims) throw WireError("frame has " + std::to_string(ndim) + " dims");
  if (codecLength == 0 || codecLength > kMaxCodecSpec) {
    throw WireError("frame codec spec length " + std::to_string(codecLength) + " is out of range");
  }
  const size_t expectedHeader = frameHeaderBytes(ndim, codecLength);
  if (headerSize != expectedHeader) {
    throw WireError("frame header is " + std::to_string(headerSize) + " bytes, its fields need " +
                    std::to_string(expectedHeader));
  }
  const uint64_t payloadLength = get(in, 32, 8);
  if (payloadLength != payload.size()) {
    throw WireError("frame payload is " + std::to_string(payload.size()) +
                    " bytes, header says " + std::to_string(payloadLength));
  }
  if (get(in, 40, 8) != frameChecksum(in, headerSize, payload)) {
    throw WireError("frame checksum mismatch (corrupted in transit)");
  }
  TensorFrame frame;
  frame.direction = static_cast<FrameDirection>(direction);
  frame.job = get(in, 8, 8);
  frame.step = get(in, 16, 8);
  frame.microBatch = static_cast<uint32_t>(get(in, 24, 4));
  frame.stage = static_cast<uint16_t>(get(in, 28, 2));
  frame.tensor.dtype = static_cast<WireDType>(dtype);
  for (size_t i = 0; i < ndim; ++i) {
    frame.tensor.shape.push_back(static_cast<int64_t>(get(in, kFrameFixedHeader + 8 * i, 8)));
  }
  frame.tensor.codec.assign(reinterpret_cast<const char*>(in) + kFrameFixedHeader + 8 * ndim, codecLength);
  frame.tensor.payload = std::move(payload);
  return frame;
}

std::string toString(FrameDirection direction) {
  switch (direction) {
    case FrameDirection::Forward: return "forward";
    case FrameDirection::Backward: return "backward";
    case FrameDirection::Eval: return "eval";
    case FrameDirection::Probe: return "probe";
    case FrameDirection::ProbeReply: return "probe reply";
    case FrameDirection::NormUp: return "norm up";
    case FrameDirection::NormDown: return "norm down";
    case FrameDirection::TiedDown: return "tied gradient down";
    case FrameDirection::TiedUp: return "tied gradient up";
    case FrameDirection::Ack: return "ack";
  }
  return "unknown";
}

}  // namespace skytrain::compression
