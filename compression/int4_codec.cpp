// "int4": per-block absmax quantisation over the flattened tensor, kInt4Block elements a
// block. Each block sends one float32 scale s = absmax/7; each element q = round(x/s) in
// [-7, 7], two elements a byte (low nibble first, stored as q + 8). Error bound per
// element: absmax(block)/14. NaN/Inf inputs are refused. Size: ceil(n/32)*4 + ceil(n/2).
#include <immintrin.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>

#include "compression/codec_util.h"
#include "compression/float_bits.h"
#include "compression/int4_blocks.h"
#include "compression/codecs.h"
#include "compression/tensor_bytes.h"

namespace skytrain::compression {
namespace {

int64_t blocks(int64_t n) { return int4Blocks(n); }

// One whole block: its absmax as float bits, and the packed nibbles. The portable versions
// are fixed-size loops the compiler vectorises; where the CPU has AVX2 (checked once at
// run time) the nibbles are packed and unpacked with byte shuffles instead.
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

// The same arithmetic: |x| max, q = round-to-nearest-even(x * 7/absmax) + 8 (the CPU's
// default rounding, as roundSmall), two q a byte, low nibble first.
__attribute__((target("avx2"))) uint32_t encodeBlockAvx2(const float* x, uint8_t* packed) {
  const __m256 signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 v[4];
  for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
  // The absmax as absMaxBits finds it: the largest bit pattern with the sign cleared (NaN
  // above Inf above every finite value).
  __m256i mi = _mm256_castps_si256(_mm256_and_ps(v[0], signless));
  for (int k = 1; k < 4; ++k) mi = _mm256_max_epu32(mi, _mm256_castps_si256(_mm256_and_ps(v[k], signless)));
  __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(mi), _mm256_extracti128_si256(mi, 1));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, _MM_SHUFFLE(1, 0, 3, 2)));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, _MM_SHUFFLE(2, 3, 0, 1)));
  const uint32_t bits = static_cast<uint32_t>(_mm_cvtsi128_si32(m4));
  const float absmax = bitsToFloat(bits);
  const float inverse = absmax > 0.f && bits < kNonFiniteBits ? 7.f / absmax : 0.f;
  const __m256 scale = _mm256_set1_ps(inverse);
  const __m256i eight = _mm256_set1_epi32(8);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[k], scale)), eight);
  // 32 x int32 -> 32 x uint8 in order (packs work per 128-bit lane: fix the order after).
  const __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(q[0], q[1]), _MM_SHUFFLE(3, 1, 2, 0));
  const __m256i words2 = _mm256_permute4x64_epi64(_mm256_packus_epi32(q[2], q[3]), _MM_SHUFFLE(3, 1, 2, 0));
  const __m256i bytes = _mm256_permute4x64_epi64(_mm256_packus_epi16(words, words2), _MM_SHUFFLE(3, 1, 2, 0));
  // Pairs (even, odd) -> even + 16 * odd, one byte each.
  const __m256i pairs = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(0x1001));
  const __m128i out = _mm_packus_epi16(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(packed), out);
  return bits;
}

__attribute__((target("avx2"))) void decodeBlockAvx2(const uint8_t* packed, float scale, float* out) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i low = _mm_and_si128(bytes, mask), high = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  const __m128i first = _mm_unpacklo_epi8(low, high), second = _mm_unpackhi_epi8(low, high);  // elements 0-15, 16-31
  const __m256 s = _mm256_set1_ps(scale);
  const __m256i eight = _mm256_set1_epi32(8);
  const __m128i groups[4] = {first, _mm_srli_si128(first, 8), second, _mm_srli_si128(second, 8)};
  for (int k = 0; k < 4; ++k) {
    const __m256i q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(groups[k]), eight);
    _mm256_storeu_ps(out + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), s));
  }
}

bool haveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}

}  // namespace

uint32_t encodeInt4Block(const float* x, uint8_t* packed) {
  return haveAvx2() ? encodeBlockAvx2(x, packed) : encodeBlockPortable(x, packed);
}

void decodeInt4Block(const uint8_t* packed, float scale, float* out) {
  haveAvx2() ? decodeBlockAvx2(packed, scale, out) : decodeBlockPortable(packed, scale, out);
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
