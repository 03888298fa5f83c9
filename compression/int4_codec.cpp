// "int4": per-block absmax quantisation over the flattened tensor, kInt4Block elements a
// block. Each block sends one float32 scale s = absmax/7; each element q = round(x/s) in
// [-7, 7], two elements a byte (low nibble first, stored as q + 8). Error bound per
// element: absmax(block)/14. NaN/Inf inputs are refused. Size: ceil(n/32)*4 + ceil(n/2).
#include <torch/torch.h>

#include <cmath>
#include <cstring>

#include "compression/codec_util.h"
#include "compression/float_bits.h"
#include "compression/codecs.h"
#include "compression/tensor_bytes.h"

namespace skytrain::compression {
namespace {

constexpr int64_t kInt4Block = 32;

int64_t blocks(int64_t n) { return (n + kInt4Block - 1) / kInt4Block; }
size_t int4Size(int64_t n) { return static_cast<size_t>(blocks(n) * 4 + (n + 1) / 2); }

class Int4Codec : public Codec {
 public:
  std::string spec() const override { return "int4"; }

  EncodedTensor encode(const at::Tensor& input) override {
    const at::Tensor x = floatInput("int4", input);
    EncodedTensor out = encodedHeader(spec(), input);
    const int64_t n = x.numel();
    out.payload.assign(int4Size(n), '\0');
    char* scales = out.payload.data();  // float32 each, unaligned: copied with memcpy
    auto* packed = reinterpret_cast<uint8_t*>(out.payload.data() + blocks(n) * 4);
    const float* data = x.data_ptr<float>();
    for (int64_t b = 0; b < blocks(n); ++b) {
      const int64_t begin = b * kInt4Block, end = std::min(n, begin + kInt4Block);
      const uint32_t bits = absMaxBits(data + begin, end - begin);
      if (bits >= kNonFiniteBits) requireFinite("int4", x);  // throws, counting them
      const float absmax = bitsToFloat(bits);
      const float inverse = absmax > 0.f ? 7.f / absmax : 0.f;
      const float scale = absmax / 7.f;
      std::memcpy(scales + 4 * b, &scale, 4);
      for (int64_t i = begin; i < end; ++i) {
        const int q = roundSmall(data[i] * inverse) + 8;
        packed[i / 2] |= static_cast<uint8_t>(q << (4 * (i % 2)));
      }
    }
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    const int64_t n = elementCount(encoded.shape);
    requirePayloadSize("int4", encoded, int4Size(n));
    const char* scales = encoded.payload.data();
    const auto* packed = reinterpret_cast<const uint8_t*>(encoded.payload.data() + blocks(n) * 4);
    at::Tensor out = torch::empty({n}, torch::kFloat);
    float* data = out.data_ptr<float>();
    for (int64_t b = 0; b < blocks(n); ++b) {
      float scale;
      std::memcpy(&scale, scales + 4 * b, 4);
      const int64_t end = std::min(n, (b + 1) * kInt4Block);
      for (int64_t i = b * kInt4Block; i < end; ++i) {
        const int q = static_cast<int>((packed[i / 2] >> (4 * (i % 2))) & 0xf) - 8;
        data[i] = scale * static_cast<float>(q);
      }
    }
    return out.view(encoded.shape).to(toScalarType(encoded.dtype));
  }
};

}  // namespace

CodecPtr makeInt4Codec(const std::string& argument, CodecPtr inner) {
  requireNoArgument("int4", argument, inner.get());
  return std::make_unique<Int4Codec>();
}

}  // namespace skytrain::compression
