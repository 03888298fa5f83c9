// "int3": per-block absmax quantisation to seven levels, kInt3Block = 64 elements a block
// over the flattened tensor (the last zero-padded). Each block sends one float32 scale
// s = absmax/3, and each element c = round(x/s) + 3 in [0, 6] as three bit planes: plane p
// is a little-endian u64 whose bit i is bit p of element i's c. 28 bytes a 64-block:
// 9.14x fewer than float32. Error bound per element: absmax(block)/6. NaN/Inf are refused.
// Size: ceil(n/64) * 28.
//
// "int3+rot" (compression/codecs/rotation_codec.cpp) runs the same kernels on each 64-block's
// Hadamard rotation, in registers, without a rotated copy: its error bound is
// 8/6 * ||x_block||_2 (the rotation preserves the norm; see there).
//
// With AVX2 (checked at run time) a block's 64 levels go to bytes with signed packs, and a
// plane is one shift and one byte movemask per 32 elements; decoding spreads a plane's bits
// back over bytes with a byte shuffle and a compare. The portable path is the same
// arithmetic in loops, and gives the same bytes.
#include <immintrin.h>

#include <cstring>

#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/kernels/float_bits.h"
#include "compression/kernels/hadamard.h"
#include "compression/codecs/block_codec.h"
#include "compression/kernels/int4_avx2.h"
#include "compression/kernels/rotated_blocks.h"

namespace skytrain::compression {
namespace {

constexpr int64_t kInt3Block = 64;  // the rotation's block, so "int3+rot" needs no padding of its own
constexpr size_t kInt3BlockBytes = 4 + 3 * 8;  // a float32 scale, three 64-bit planes

int64_t int3Blocks(int64_t n) { return (n + kInt3Block - 1) / kInt3Block; }
// Payload bytes of n elements: every block's scale, then every block's three planes.
size_t int3Size(int64_t n) { return static_cast<size_t>(int3Blocks(n)) * kInt3BlockBytes; }

constexpr int kLevels = 3;  // c - 3 in [-3, 3]

static_assert(kInt3Block == kRotationBlock, "int3+rot quantises whole rotated blocks");

// One block of 64 (already rotated where it is): the scale's bits, and the planes.
uint32_t encodeBlockPortable(const float* x, char* scale, uint8_t* planes) {
  const uint32_t bits = absMaxBits(x, kInt3Block);
  const float absmax = bitsToFloat(bits);
  const float inverse = absmax > 0.f && bits < kNonFiniteBits ? kLevels / absmax : 0.f;
  uint64_t plane[3] = {0, 0, 0};
  for (int i = 0; i < kInt3Block; ++i) {
    const auto c = static_cast<uint64_t>(roundSmall(x[i] * inverse) + kLevels);
    for (int p = 0; p < 3; ++p) plane[p] |= ((c >> p) & 1u) << i;
  }
  const float s = absmax / kLevels;
  std::memcpy(scale, &s, 4);
  std::memcpy(planes, plane, sizeof plane);
  return bits;
}

void decodeBlockPortable(const char* scale, const uint8_t* planes, float* out) {
  float s;
  std::memcpy(&s, scale, 4);
  uint64_t plane[3];
  std::memcpy(plane, planes, sizeof plane);
  for (int i = 0; i < kInt3Block; ++i) {
    const auto c = static_cast<int32_t>(((plane[0] >> i) & 1u) | (((plane[1] >> i) & 1u) << 1) | (((plane[2] >> i) & 1u) << 2));
    out[i] = s * static_cast<float>(c - kLevels);
  }
}

// 32 int32 levels in q[0..3] -> 32 bytes c = q + 3, in element order.
SKYTRAIN_AVX2 __m256i levelBytes(const __m256i* q) { return _mm256_add_epi8(orderedBytes(q), _mm256_set1_epi8(kLevels)); }

// Bit p of each of the 32 bytes (values below 8): a 16-bit shift brings bit p of both
// bytes of a pair to their top bits, which the movemask collects.
SKYTRAIN_AVX2 uint64_t planeBits(__m256i bytes, int p) {
  return static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_sll_epi16(bytes, _mm_cvtsi32_si128(7 - p))));
}

// The 64 floats in r[0..7] (unscaled rotation: `fold` is 1/8; else 1), quantised.
SKYTRAIN_AVX2 uint32_t quantiseInt3Registers(const __m256* r, float fold, char* scale, uint8_t* planes) {
  const uint32_t bits = maxOfLanes(_mm256_max_epu32(absMaxLanesRegisters(r), absMaxLanesRegisters(r + 4)));
  if (bits >= kNonFiniteBits) return bits;
  const float absmax = bitsToFloat(bits) * fold;
  const float s = absmax / kLevels;
  std::memcpy(scale, &s, 4);
  const __m256 inverse = _mm256_set1_ps(absmax > 0.f ? kLevels / absmax * fold : 0.f);
  __m256i q[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(r[k], inverse));
  const __m256i low = levelBytes(q), high = levelBytes(q + 4);
  uint64_t plane[3];
#pragma GCC unroll 3
  for (int p = 0; p < 3; ++p) plane[p] = planeBits(low, p) | (planeBits(high, p) << 32);
  std::memcpy(planes, plane, sizeof plane);
  return bits;
}

// 32 bytes, each -1 where bit i of word `index` of `words` is set (i the byte's index),
// else 0: the word broadcast, each byte given its byte of it, then its bit tested.
SKYTRAIN_AVX2 __m256i spreadBits(__m256i words, int index) {
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i which = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i word = _mm256_permutevar8x32_epi32(words, _mm256_set1_epi32(index));
  return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(word, which), select), select);
}

// The inverse: 64 floats scale * (c - 3) into r[0..7]. The 24 plane bytes are six 32-bit
// words, word 2p + h holding plane p of half h; with s_p = -bit p (spreadBits),
// t = 4 s_2 + 2 s_1 + s_0 = -c, so c - 3 = -3 - t.
SKYTRAIN_AVX2 void restoreInt3Registers(const uint8_t* planes, float scale, __m256* r) {
  const __m256i words =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(planes))),
                              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(planes + 16)), 1);
  const __m256 s = _mm256_set1_ps(scale);
#pragma GCC unroll 2
  for (int half = 0; half < 2; ++half) {
    __m256i t = spreadBits(words, 4 + half);
    t = _mm256_add_epi8(_mm256_add_epi8(t, t), spreadBits(words, 2 + half));
    t = _mm256_add_epi8(_mm256_add_epi8(t, t), spreadBits(words, half));
    const __m256i c = _mm256_sub_epi8(_mm256_set1_epi8(-kLevels), t);
    const __m128i low = _mm256_castsi256_si128(c), high = _mm256_extracti128_si256(c, 1);
    const __m128i groups[4] = {low, _mm_srli_si128(low, 8), high, _mm_srli_si128(high, 8)};
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) r[4 * half + k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(groups[k])), s);
  }
}

// The kernels as compression/kernels/rotated_blocks.h drives them: every block's scale first, then
// every block's planes.
struct Int3Kernels {
  static int64_t scaleAt(int64_t b) { return 4 * b; }
  static int64_t planesAt(int64_t blocks, int64_t b) { return 4 * blocks + 24 * b; }
  static SKYTRAIN_AVX2 uint32_t quantise(const __m256* r, float fold, char* payload, int64_t blocks, int64_t b) {
    return quantiseInt3Registers(r, fold, payload + scaleAt(b), reinterpret_cast<uint8_t*>(payload + planesAt(blocks, b)));
  }
  static SKYTRAIN_AVX2 void restore(const char* payload, int64_t blocks, int64_t b, float fold, __m256* r) {
    float s;
    std::memcpy(&s, payload + scaleAt(b), 4);
    restoreInt3Registers(reinterpret_cast<const uint8_t*>(payload + planesAt(blocks, b)), s * fold, r);
  }
  static uint32_t encodePortable(const float* block, char* payload, int64_t blocks, int64_t b) {
    return encodeBlockPortable(block, payload + scaleAt(b), reinterpret_cast<uint8_t*>(payload + planesAt(blocks, b)));
  }
  static void decodePortable(const char* payload, int64_t blocks, int64_t b, float* block) {
    decodeBlockPortable(payload + scaleAt(b), reinterpret_cast<const uint8_t*>(payload + planesAt(blocks, b)), block);
  }
};

}  // namespace

const BlockFormat kInt3Format = {"int3", int3Size,
                                   rotated_blocks::encode<Int3Kernels>,         rotated_blocks::decode<Int3Kernels>,
                                   rotated_blocks::encodeResidual<Int3Kernels>, rotated_blocks::decodeResidual<Int3Kernels>};

CodecPtr makeInt3Codec(const std::string& argument, CodecPtr inner) {
  requireNoArgument("int3", argument, inner.get());
  return makeBlockCodec(kInt3Format);
}

}  // namespace skytrain::compression
