// The input layout of codec_decode_fuzz, shared with write_seeds (which writes real
// encodings in it):
//
//   byte 0       the codec: kCodecSpecs[byte % kCodecSpecs.size()]
//   byte 1       the decoded tensor's dtype: WireDType(1 + byte % 7)
//   byte 2       ndim = byte % (kMaxFuzzDims + 1)
//   ndim bytes   each dimension = byte % (kMaxFuzzDim + 1)
//   the rest     the payload
//
// Shapes stay small (at most 64^3 elements): the daemon checks a frame's shape against the
// one it expects before it decodes, so the decoders' contract is for a given shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compression/wire/encoded_tensor.h"

namespace skytrain::fuzz {

// Each registered codec alone, with arguments, and in chains; codec_decode_fuzz checks at
// start-up that every name in the registry appears here.
inline const std::vector<std::string> kCodecSpecs = {
    "none",         "fp16",          "bf16",        "int8",           "int4",
    "topk:0.05",    "topk:1",        "svd:rank=4",  "svd:0.5",        "fp16+svd:0.5",
    "int8+topk:0.1", "bf16+topk:0.3", "int4+svd:rank=2", "ef(int8)", "ef(fp16+svd:0.5)",
    "ef(int4+topk:0.2)", "tokens", "tokens+zstd", "zstd", "int8+zstd", "int4+rot", "ef(int4+rot)",
    "int3", "int3+rot", "q13", "q13+rot", "q13+pred", "ef(q13+rot)+pred"};

constexpr size_t kMaxFuzzDims = 3;
constexpr int64_t kMaxFuzzDim = 64;
constexpr int kWireDTypes = 7;

struct CodecInput {
  size_t codec = 0;  // index into kCodecSpecs
  compression::WireDType dtype = compression::WireDType::Float32;
  std::vector<int64_t> shape;
  std::string payload;
};

inline std::optional<CodecInput> readCodecInput(const uint8_t* data, size_t size) {
  if (size < 3) return std::nullopt;
  CodecInput in;
  in.codec = data[0] % kCodecSpecs.size();
  in.dtype = static_cast<compression::WireDType>(1 + data[1] % kWireDTypes);
  const size_t ndim = data[2] % (kMaxFuzzDims + 1);
  if (size < 3 + ndim) return std::nullopt;
  for (size_t i = 0; i < ndim; ++i) in.shape.push_back(data[3 + i] % (kMaxFuzzDim + 1));
  in.payload.assign(reinterpret_cast<const char*>(data) + 3 + ndim, size - 3 - ndim);
  return in;
}

// The inverse of readCodecInput, for a shape within the caps.
inline std::string writeCodecInput(const CodecInput& in) {
  std::string out;
  out += static_cast<char>(in.codec);
  out += static_cast<char>(static_cast<int>(in.dtype) - 1);
  out += static_cast<char>(in.shape.size());
  for (int64_t dim : in.shape) out += static_cast<char>(dim);
  return out + in.payload;
}

}  // namespace skytrain::fuzz
