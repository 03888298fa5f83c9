// int4's block arithmetic on AVX2 registers, shared by "int4" (compression/codecs/int4_codec.cpp)
// and the fused "int4+rot" (compression/codecs/rotation_codec.cpp), which rotates eight registers
// and quantises them without a round trip through memory. Callers must be compiled for the
// same target ("avx2,fma") and check the CPU at run time (haveAvx2Fma) before calling.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "compression/kernels/float_bits.h"

namespace skytrain::compression {

#define SKYTRAIN_AVX2 __attribute__((target("avx2,fma"), always_inline)) inline

inline bool haveAvx2Fma() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return have;
}

// |x| of the 32 floats in v[0..3] as bit patterns (sign cleared), reduced to eight lanes
// with an unsigned max. The bits order like the values, NaN above Inf above every finite
// value, so the largest is the block's absmax as int4 finds it.
SKYTRAIN_AVX2 __m256i absMaxLanesRegisters(const __m256* v) {
  const __m256 signless = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256i mi = _mm256_castps_si256(_mm256_and_ps(v[0], signless));
#pragma GCC unroll 4
  for (int k = 1; k < 4; ++k) mi = _mm256_max_epu32(mi, _mm256_castps_si256(_mm256_and_ps(v[k], signless)));
  return mi;
}

// The largest of eight unsigned lanes.
SKYTRAIN_AVX2 uint32_t maxOfLanes(__m256i lanes) {
  __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, _MM_SHUFFLE(1, 0, 3, 2)));
  m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m4));
}

// The absmax bits of the 32 floats in v[0..3].
SKYTRAIN_AVX2 uint32_t absMaxBitsRegisters(const __m256* v) { return maxOfLanes(absMaxLanesRegisters(v)); }

// Four blocks' eight-lane maxima reduced together: element i (0-3) of each 128-bit half
// holds block i's max over that half (maxHalves combines the halves).
SKYTRAIN_AVX2 __m256i maxOfFour(__m256i m0, __m256i m1, __m256i m2, __m256i m3) {
  const __m256i m01 = _mm256_max_epu32(_mm256_unpacklo_epi32(m0, m1), _mm256_unpackhi_epi32(m0, m1));
  const __m256i m23 = _mm256_max_epu32(_mm256_unpacklo_epi32(m2, m3), _mm256_unpackhi_epi32(m2, m3));
  return _mm256_max_epu32(_mm256_unpacklo_epi64(m01, m23), _mm256_unpackhi_epi64(m01, m23));
}

// Two maxOfFour results -> the eight blocks' maxima in lanes 0-7.
SKYTRAIN_AVX2 __m256i maxHalves(__m256i low, __m256i high) {
  return _mm256_max_epu32(_mm256_permute2x128_si256(low, high, 0x20), _mm256_permute2x128_si256(low, high, 0x31));
}

// q = round-to-nearest-even(x * inverse) (the CPU's default rounding, as roundSmall) of the
// 32 floats in v[0..3], stored as q + 8, two a byte, low nibble first. inverse is 7/absmax
// (0 for an all-zero block), so q lies in [-7, 7].
// 32 small int32 levels in q[0..3] -> 32 bytes in element order: two signed packs leave,
// per 128-bit lane, groups of four from q[0], q[1], q[2], q[3]; one 32-bit permute puts
// them in order. Shared with int3 (compression/codecs/int3_codec.cpp).
SKYTRAIN_AVX2 __m256i orderedBytes(const __m256i* q) {
  const __m256i grouped = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  return _mm256_permutevar8x32_epi32(grouped, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

SKYTRAIN_AVX2 void packInt4Registers(const __m256* v, __m256 inverse, uint8_t* packed) {
  __m256i q[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], inverse));
  const __m256i bytes = _mm256_add_epi8(orderedBytes(q), _mm256_set1_epi8(8));  // q + 8
  // Pairs (even, odd) -> even + 16 * odd, one byte each.
  const __m256i pairs = _mm256_maddubs_epi16(bytes, _mm256_set1_epi16(0x1001));
  const __m128i out = _mm_packus_epi16(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(packed), out);
}

// Both for one block of 32 floats in v[0..3]. Returns the absmax's bits (>= kNonFiniteBits:
// the block held NaN or Inf, and the bytes mean nothing).
SKYTRAIN_AVX2 uint32_t quantiseInt4Registers(const __m256* v, uint8_t* packed) {
  const uint32_t bits = absMaxBitsRegisters(v);
  const float absmax = bitsToFloat(bits);
  const float inverse = absmax > 0.f && bits < kNonFiniteBits ? 7.f / absmax : 0.f;
  packInt4Registers(v, _mm256_set1_ps(inverse), packed);
  return bits;
}

// The inverse: 32 floats scale * (q - 8) from 16 bytes, into v[0..3].
SKYTRAIN_AVX2 void restoreInt4Registers(const uint8_t* packed, float scale, __m256* v) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i mask = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
  const __m128i low = _mm_and_si128(bytes, mask), high = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  const __m128i first = _mm_sub_epi8(_mm_unpacklo_epi8(low, high), eight);  // elements 0-15
  const __m128i second = _mm_sub_epi8(_mm_unpackhi_epi8(low, high), eight);  // 16-31
  const __m256 s = _mm256_set1_ps(scale);
  const __m128i groups[4] = {first, _mm_srli_si128(first, 8), second, _mm_srli_si128(second, 8)};
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) v[k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(groups[k])), s);
}

}  // namespace skytrain::compression
