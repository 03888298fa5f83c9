// The 64-point orthonormal Walsh-Hadamard rotation of "rot" (compression/codecs/rotation_codec.cpp),
// shared with the codecs whose "+rot" form is fused: rotated and quantised in registers
// ("int4+rot" there, "int3+rot" in compression/codecs/int3_codec.cpp).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "compression/kernels/int4_avx2.h"

namespace skytrain::compression {

constexpr int64_t kRotationBlock = 64;

inline int64_t paddedLength(int64_t n) { return (n + kRotationBlock - 1) / kRotationBlock * kRotationBlock; }

// In place, over `blocks` consecutive 64-blocks: H/8 (its own inverse). Uses AVX2 where the
// CPU has it; both paths give the same bits.
void hadamard(float* data, int64_t blocks);

// The six butterfly passes on eight AVX registers: h = 1, 2, 4 inside each register, h = 8,
// 16, 32 between registers. Inside a register the partner t comes from a permute, and one
// FMA gives t + v on the lower element of a pair and t - v on the upper (v times +-1 is
// exact, so each is the sum the portable loop rounds): the results are bit-identical.
// Unscaled: the callers fold the 1/8 into a multiply they make anyway where they can. A
// power of two, it changes no rounding unless a value is subnormal (below 1.2e-38).
SKYTRAIN_AVX2 void hadamardRegistersUnscaled(__m256* r) {
  const __m256 odd = _mm256_setr_ps(1, -1, 1, -1, 1, -1, 1, -1);
  const __m256 pairs = _mm256_setr_ps(1, 1, -1, -1, 1, 1, -1, -1);
  const __m256 halves = _mm256_setr_ps(1, 1, 1, 1, -1, -1, -1, -1);
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    __m256 v = r[k];
    v = _mm256_fmadd_ps(v, odd, _mm256_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));  // h = 1
    v = _mm256_fmadd_ps(v, pairs, _mm256_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));  // h = 2
    r[k] = _mm256_fmadd_ps(v, halves, _mm256_permute2f128_ps(v, v, 0x01));  // h = 4
  }
#pragma GCC unroll 8
  for (int d = 1; d < 8; d *= 2) {  // h = 8, 16, 32
#pragma GCC unroll 8
    for (int i = 0; i < 8; i += 2 * d) {
#pragma GCC unroll 8
      for (int k = i; k < i + d; ++k) {
        const __m256 a = r[k], c = r[k + d];
        r[k] = _mm256_add_ps(a, c);
        r[k + d] = _mm256_sub_ps(a, c);
      }
    }
  }
}

}  // namespace skytrain::compression
