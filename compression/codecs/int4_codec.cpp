// "int4": per-block absmax quantisation over the flattened tensor, kInt4Block elements a
// block. Each block sends one float32 scale s = absmax/7; each element q = round(x/s) in
// [-7, 7], two elements a byte (low nibble first, stored as q + 8). Error bound per
// element: absmax(block)/14. NaN/Inf inputs are refused. Size: ceil(n/32)*4 + ceil(n/2).
#include <immintrin.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>

#include "compression/codec_util.h"
#include "compression/kernels/float_bits.h"
#include "compression/kernels/int4_avx2.h"
#include "compression/kernels/int4_blocks.h"
#include "compression/codecs.h"
#include "compression/tensor_bytes.h"

namespace skytrain::compression {
namespace {

int64_t blocks(int64_t n) { return int4Blocks(n); }

// One whole block: its absmax as float bits, and the packed nibbles. The portable versions
// are fixed-size loops the compiler vectorises; where the CPU has AVX2 and FMA (checked
// once at run time) the nibbles are packed and unpacked with byte shuffles instead.
uint32_t encodeBlockPortable(const float* x, uint8_t* packed) {
  const uint32_t bits = absMaxBits(x, kInt4Block);
  const float absmax = bitsToFloat(bits);
  const float inverse = absmax > 0.f && bits < kNonFiniteBits ? 7.f / absmax : 0.f;
  int32_t q[kInt4Block];
  for (int i = 0; i < kInt4Block; ++i) q[i] = roundSmall(x[i] * inverse) + 8;
  for (int i = 0; i < kInt4Block / 2; ++i) packed[i] = static_cast<uint8_t>(q[2 * i] | (q[2 * i + 1] << 4));
  return bits;
}

void decodeBlockPortable(const uint8_t* packed, float scale, float* out) {
  for (int i = 0; i < kInt4Block / 2; ++i) {
    out[2 * i] = scale * static_cast<float>(static_cast<int32_t>(packed[i] & 0xf) - 8);
    out[2 * i + 1] = scale * static_cast<float>(static_cast<int32_t>(packed[i] >> 4) - 8);
  }
}

// The same arithmetic on AVX2 registers (compression/kernels/int4_avx2.h).
__attribute__((target("avx2,fma"))) uint32_t encodeBlockAvx2(const float* x, uint8_t* packed) {
  __m256 v[4];
  for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
  return quantiseInt4Registers(v, packed);
}

__attribute__((target("avx2,fma"))) void decodeBlockAvx2(const uint8_t* packed, float scale, float* out) {
  __m256 v[4];
  restoreInt4Registers(packed, scale, v);
  for (int k = 0; k < 4; ++k) _mm256_storeu_ps(out + 8 * k, v[k]);
}

}  // namespace

uint32_t encodeInt4Block(const float* x, uint8_t* packed) {
  return haveAvx2Fma() ? encodeBlockAvx2(x, packed) : encodeBlockPortable(x, packed);
}

void decodeInt4Block(const uint8_t* packed, float scale, float* out) {
  haveAvx2Fma() ? decodeBlockAvx2(packed, scale, out) : decodeBlockPortable(packed, scale, out);
}

namespace {

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
    const int64_t full = n / kInt4Block;
    for (int64_t b = 0; b < full; ++b) {
      const uint32_t bits = encodeInt4Block(data + b * kInt4Block, packed + b * kInt4Block / 2);
      if (bits >= kNonFiniteBits) requireFinite("int4", x);  // throws, counting them
      const float scale = bitsToFloat(bits) / 7.f;
      std::memcpy(scales + 4 * b, &scale, 4);
    }
    if (full < blocks(n)) {  // the last, partial block: zero-padded to a whole one
      float tail[kInt4Block] = {};
      std::memcpy(tail, data + full * kInt4Block, sizeof(float) * static_cast<size_t>(n - full * kInt4Block));
      uint8_t tailPacked[kInt4Block / 2];
      const uint32_t bits = encodeInt4Block(tail, tailPacked);
      if (bits >= kNonFiniteBits) requireFinite("int4", x);
      const float scale = bitsToFloat(bits) / 7.f;
      std::memcpy(scales + 4 * full, &scale, 4);
      std::memcpy(packed + full * kInt4Block / 2, tailPacked, static_cast<size_t>((n - full * kInt4Block + 1) / 2));
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
    const int64_t full = n / kInt4Block;
    for (int64_t b = 0; b < full; ++b) {
      float scale;
      std::memcpy(&scale, scales + 4 * b, 4);
      decodeInt4Block(packed + b * kInt4Block / 2, scale, data + b * kInt4Block);
    }
    if (full < blocks(n)) {
      float scale, tail[kInt4Block];
      std::memcpy(&scale, scales + 4 * full, 4);
      uint8_t tailPacked[kInt4Block / 2] = {};
      std::memcpy(tailPacked, packed + full * kInt4Block / 2, static_cast<size_t>((n - full * kInt4Block + 1) / 2));
      decodeInt4Block(tailPacked, scale, tail);
      std::memcpy(data + full * kInt4Block, tail, sizeof(float) * static_cast<size_t>(n - full * kInt4Block));
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
