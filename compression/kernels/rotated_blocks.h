// The block loop of the 64-block codecs whose "+rot" form is fused ("int3",
// compression/codecs/int3_codec.cpp; "q13", compression/codecs/q13_codec.cpp): whole blocks go through
// eight AVX2 registers, rotated there when asked (unscaled: the kernels fold the 1/8 in);
// the last, partial block, and every block on a CPU without AVX2, through a zero-padded
// copy rotated in memory. Both paths give the same bytes.
//
// A codec gives its kernels as static members of K, each told the payload, the message's
// block count and the block's index (so a layout may put a block's parts apart):
//   uint32_t K::quantise(const __m256* r, float fold, char* payload, int64_t blocks, int64_t b)
//   void K::restore(const char* payload, int64_t blocks, int64_t b, float fold, __m256* r)
//   uint32_t K::encodePortable(const float* block, char* payload, int64_t blocks, int64_t b)
//   void K::decodePortable(const char* payload, int64_t blocks, int64_t b, float* block)
// The encoders return the block's absmax as float bits (>= kNonFiniteBits: NaN or Inf).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "compression/kernels/float_bits.h"
#include "compression/kernels/hadamard.h"
#include "compression/kernels/int4_avx2.h"
#include "compression/kernels/prediction_kernels.h"

namespace skytrain::compression {
namespace rotated_blocks {

template <class K>
__attribute__((target("avx2,fma"))) int64_t encodeWhole(const float* data, int64_t whole, bool rotate, char* payload,
                                                        int64_t blocks) {
  const float fold = rotate ? 0.125f : 1.f;
  for (int64_t b = 0; b < whole; ++b) {
    __m256 r[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(data + b * kRotationBlock + 8 * k);
    if (rotate) hadamardRegistersUnscaled(r);
    if (K::quantise(r, fold, payload, blocks, b) >= kNonFiniteBits) return b;
  }
  return whole;
}

template <class K>
__attribute__((target("avx2,fma"))) void decodeWhole(const char* payload, int64_t whole, bool rotate, int64_t blocks,
                                                     float* out) {
  const float fold = rotate ? 0.125f : 1.f;
  for (int64_t b = 0; b < whole; ++b) {
    __m256 r[8];
    K::restore(payload, blocks, b, fold, r);
    if (rotate) hadamardRegistersUnscaled(r);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(out + b * kRotationBlock + 8 * k, r[k]);
  }
}

// The decoded residual of one block (r, at column j of `row`) into the row's sums.
SKYTRAIN_AVX2 void addToSums(const prediction::Predictor& p, const prediction::Sums& sums, int64_t row, int64_t j,
                             const __m256* r) {
  const int64_t d = p.rows.d;
  float* token = sums.tokens + static_cast<int64_t>(sums.slot[p.rows.id[row]]) * d + j;
  float* position = sums.positions + (row % p.rows.t) * d + j;
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    _mm256_storeu_ps(token + 8 * k, _mm256_add_ps(_mm256_loadu_ps(token + 8 * k), r[k]));
    _mm256_storeu_ps(position + 8 * k, _mm256_add_ps(_mm256_loadu_ps(position + 8 * k), r[k]));
  }
}

// Prefetch distance for the input rows of the fused residual loops: the two table rows read
// beside each input row leave the hardware prefetcher behind on the input (4 kB ahead: 0.75
// ms a 4096x768 message against 0.95-1.18 without, docs/BENCHMARKS.md). A prefetch never
// faults, so the rows past the end need no check; the address is formed as an integer.
constexpr uintptr_t kResidualPrefetchBytes = 4096;

SKYTRAIN_AVX2 void prefetchAhead(const float* at) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(at) + kResidualPrefetchBytes;
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) _mm_prefetch(reinterpret_cast<const char*>(base + 64 * k), _MM_HINT_T0);
}

// BlockFormat::encodeResidual: rows [first, end) less their prediction, quantised in
// registers as encodeWhole quantises the difference; blocks numbered from row first. The
// caller checks fusesResidual(d). False on NaN or Inf.
template <class K>
__attribute__((target("avx2,fma"))) bool encodeResidual(const prediction::Predictor& p, int64_t first, int64_t end,
                                                        const float* data, bool rotate, char* payload,
                                                        const prediction::Sums* learn) {
  const float fold = rotate ? 0.125f : 1.f;
  const int64_t d = p.rows.d, blocks = (end - first) * (d / kRotationBlock);
  int64_t b = 0;
  for (int64_t row = first; row < end; ++row) {
    const float* x = data + (row - first) * d;
    const float* token = p.token + p.rows.id[row] * d;
    const float* position = p.position + (row % p.rows.t) * d;
    for (int64_t j = 0; j < d; j += kRotationBlock, ++b) {
      prefetchAhead(x + j);
      __m256 r[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const int64_t at = j + 8 * k;
        r[k] = _mm256_sub_ps(_mm256_loadu_ps(x + at),
                             _mm256_add_ps(_mm256_loadu_ps(token + at), _mm256_loadu_ps(position + at)));
      }
      if (rotate) hadamardRegistersUnscaled(r);
      if (K::quantise(r, fold, payload, blocks, b) >= kNonFiniteBits) return false;
      if (learn == nullptr) continue;
      K::restore(payload, blocks, b, fold, r);  // what the receiver will decode
      if (rotate) hadamardRegistersUnscaled(r);
      addToSums(p, *learn, row, j, r);
    }
  }
  return true;
}

// BlockFormat::decodeResidual: the inverse, each row's prediction added in registers.
template <class K>
__attribute__((target("avx2,fma"))) void decodeResidual(const char* payload, const prediction::Predictor& p,
                                                       int64_t first, int64_t end, bool rotate, float* out,
                                                       const prediction::Sums* learn) {
  const float fold = rotate ? 0.125f : 1.f;
  const int64_t d = p.rows.d, blocks = (end - first) * (d / kRotationBlock);
  int64_t b = 0;
  for (int64_t row = first; row < end; ++row) {
    float* y = out + (row - first) * d;
    const float* token = p.token + p.rows.id[row] * d;
    const float* position = p.position + (row % p.rows.t) * d;
    for (int64_t j = 0; j < d; j += kRotationBlock, ++b) {
      __m256 r[8];
      K::restore(payload, blocks, b, fold, r);
      if (rotate) hadamardRegistersUnscaled(r);
      if (learn != nullptr) addToSums(p, *learn, row, j, r);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const int64_t at = j + 8 * k;
        const __m256 prediction = _mm256_add_ps(_mm256_loadu_ps(token + at), _mm256_loadu_ps(position + at));
        _mm256_storeu_ps(y + at, _mm256_add_ps(r[k], prediction));
      }
    }
  }
}

// n floats (each 64-block rotated first when `rotate`) into the payload. False when a block
// holds NaN or Inf (or its rotation overflows): the payload then means nothing.
template <class K>
bool encode(const float* data, int64_t n, bool rotate, char* payload) {
  const int64_t blocks = (n + kRotationBlock - 1) / kRotationBlock, whole = n / kRotationBlock;
  int64_t done = 0;
  if (haveAvx2Fma()) {
    done = encodeWhole<K>(data, whole, rotate, payload, blocks);
    if (done < whole) return false;
  }
  float block[kRotationBlock];
  for (int64_t b = done; b < blocks; ++b) {
    const int64_t begin = b * kRotationBlock, count = std::min(kRotationBlock, n - begin);
    std::memcpy(block, data + begin, sizeof(float) * static_cast<size_t>(count));
    std::fill(block + count, block + kRotationBlock, 0.f);
    if (rotate) hadamard(block, 1);
    if (K::encodePortable(block, payload, blocks, b) >= kNonFiniteBits) return false;
  }
  return true;
}

// The inverse: n floats from the payload (the caller checks its size).
template <class K>
void decode(const char* payload, int64_t n, bool rotate, float* out) {
  const int64_t blocks = (n + kRotationBlock - 1) / kRotationBlock;
  int64_t done = 0;
  if (haveAvx2Fma()) {
    done = n / kRotationBlock;
    decodeWhole<K>(payload, done, rotate, blocks, out);
  }
  float block[kRotationBlock];
  for (int64_t b = done; b < blocks; ++b) {
    K::decodePortable(payload, blocks, b, block);
    if (rotate) hadamard(block, 1);
    const int64_t begin = b * kRotationBlock;
    std::memcpy(out + begin, block, sizeof(float) * static_cast<size_t>(std::min(kRotationBlock, n - begin)));
  }
}

}  // namespace rotated_blocks
}  // namespace skytrain::compression
