// "q13": per-block absmax quantisation to thirteen levels, kQ13Block = 64 elements a block over
// the flattened tensor (the last zero-padded), in exactly 4 bits an element with the scale
// included: 8x fewer bytes than float32.
//
// A block's scale s is bfloat16: absmax/6 rounded up to bfloat16 (so |x|/s <= 6), its 16
// bits. Each element gets c = round(x/s) + 6 in [0, 12], and four levels share one 16-bit
// little-endian word in base 13: word j (0-15) holds elements j, j+16, j+32, j+48 as
// c_j + 13 c_{j+16} + 169 c_{j+32} + 2197 c_{j+48} <= 28560 < 2^15 in its low 15 bits, and
// bit j of s in its top bit. Four 13-level digits in 15 bits (log2 13 = 3.70 bits each)
// leave that bit free, which carries the scale: 32 bytes a 64-block.
//
// Error bound per element: s/2 <= absmax(block)/12 * (1 + 2^-7), the second factor from
// rounding s up to bfloat16; a block whose absmax is below 7e-38 (s below float32's
// smallest normal) decodes to zero. Thirteen levels against int4's fifteen: the error is
// 7/6 of int4's at the same block, for 8x against int4's 6.4x. NaN/Inf are refused. Size:
// ceil(n/64) * 32.
//
// "q13+rot" (compression/codecs/rotation_codec.cpp) runs the same kernels on each 64-block's
// Hadamard rotation, in registers: its error bound is 8/12 * (1 + 2^-7) * ||x_block||_2.
//
// With AVX2 (checked at run time) the four digit registers are 16-bit packs of the levels,
// combined with three multiplies; decoding divides by 13 with a multiply-high and a shift
// (exact for every 15-bit word). The portable path is the same arithmetic in loops, and
// gives the same bytes. Crafted bytes decode to at most 8 times their block's scale (a word's
// top digit reaches 14), or NaN/Inf where the scale is.
#include <immintrin.h>

#include <cfloat>
#include <cstring>

#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/kernels/float_bits.h"
#include "compression/kernels/hadamard.h"
#include "compression/kernels/int4_avx2.h"
#include "compression/codecs/block_codec.h"
#include "compression/kernels/rotated_blocks.h"

namespace skytrain::compression {
namespace {

constexpr int64_t kQ13Block = 64;        // the rotation's block, so "q13+rot" needs no padding of its own
constexpr size_t kQ13BlockBytes = 32;    // sixteen 16-bit words: 8x fewer bytes than float32
constexpr int kQ13Levels = 6;            // c - 6 in [-6, 6]: thirteen levels

int64_t q13Blocks(int64_t n) { return (n + kQ13Block - 1) / kQ13Block; }
size_t q13Size(int64_t n) { return static_cast<size_t>(q13Blocks(n)) * kQ13BlockBytes; }

constexpr int kWords = 16;
constexpr int32_t kOffset = kQ13Levels * (1 + 13 + 169 + 2197);  // sum of 6 * 13^k: c = q + 6

static_assert(kQ13Block == kRotationBlock, "q13+rot quantises whole rotated blocks");

// absmax/6 rounded up to bfloat16, as its 16 bits. absmax is finite, so this is too.
uint16_t scaleBits(float absmax) {
  uint32_t bits;
  const float s = absmax / kQ13Levels;
  std::memcpy(&bits, &s, 4);
  if ((bits & 0xffffu) != 0) bits += 0x10000u;
  return static_cast<uint16_t>(bits >> 16);
}

float scaleOf(uint16_t bits) { return bitsToFloat(static_cast<uint32_t>(bits) << 16); }

// 1/s, or 0 where s is zero or below FLT_MIN (1/s would overflow): that block decodes to 0.
float inverseOf(uint16_t bits) {
  const float s = scaleOf(bits);
  return s >= FLT_MIN ? 1.f / s : 0.f;
}

// One block of 64 (already rotated where it is) into 16 words; the absmax's bits.
uint32_t encodeBlockPortable(const float* x, uint8_t* out) {
  const uint32_t bits = absMaxBits(x, kQ13Block);
  if (bits >= kNonFiniteBits) return bits;
  const uint16_t scale = scaleBits(bitsToFloat(bits));
  const float inverse = inverseOf(scale);
  int32_t c[kQ13Block];
  for (int i = 0; i < kQ13Block; ++i) c[i] = roundSmall(x[i] * inverse) + kQ13Levels;
  uint16_t words[kWords];
  for (int j = 0; j < kWords; ++j) {
    const int32_t digits = c[j] + 13 * (c[j + 16] + 13 * (c[j + 32] + 13 * c[j + 48]));
    words[j] = static_cast<uint16_t>(digits | (((scale >> j) & 1) << 15));
  }
  std::memcpy(out, words, sizeof words);
  return bits;
}

void decodeBlockPortable(const uint8_t* in, float* out) {
  uint16_t words[kWords];
  std::memcpy(words, in, sizeof words);
  uint16_t scale = 0;
  for (int j = 0; j < kWords; ++j) scale = static_cast<uint16_t>(scale | ((words[j] >> 15) << j));
  const float s = scaleOf(scale);
  for (int j = 0; j < kWords; ++j) {
    uint32_t v = words[j] & 0x7fffu;
    for (int k = 0; k < 3; ++k, v /= 13) out[j + 16 * k] = s * static_cast<float>(static_cast<int32_t>(v % 13) - kQ13Levels);
    out[j + 48] = s * static_cast<float>(static_cast<int32_t>(v) - kQ13Levels);
  }
}

// The 64 floats in r[0..7] (unscaled rotation: `fold` is 1/8; else 1), quantised into 16
// words. Packing r[2k], r[2k+1] to 16-bit lanes gives digit k of every word, in the order
// [0-3, 8-11, 4-7, 12-15] of 64-bit quarters, which one permute undoes after the sum.
SKYTRAIN_AVX2 uint32_t quantiseQ13Registers(const __m256* r, float fold, uint8_t* out) {
  const uint32_t bits = maxOfLanes(_mm256_max_epu32(absMaxLanesRegisters(r), absMaxLanesRegisters(r + 4)));
  if (bits >= kNonFiniteBits) return bits;
  const uint16_t scale = scaleBits(bitsToFloat(bits) * fold);
  const __m256 inverse = _mm256_set1_ps(inverseOf(scale) * fold);
  __m256i digit[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    digit[k] = _mm256_packs_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(r[2 * k], inverse)),
                                  _mm256_cvtps_epi32(_mm256_mul_ps(r[2 * k + 1], inverse)));
  }
  __m256i words = _mm256_add_epi16(digit[0], _mm256_set1_epi16(kOffset));
  words = _mm256_add_epi16(words, _mm256_mullo_epi16(digit[1], _mm256_set1_epi16(13)));
  words = _mm256_add_epi16(words, _mm256_mullo_epi16(digit[2], _mm256_set1_epi16(169)));
  words = _mm256_add_epi16(words, _mm256_mullo_epi16(digit[3], _mm256_set1_epi16(2197)));
  words = _mm256_permute4x64_epi64(words, 0xd8);
  // Bit j of the scale into word j's top bit.
  const __m256i bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
                                        static_cast<int16_t>(0x8000));
  const __m256i set = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(static_cast<int16_t>(scale)), bit), bit);
  words = _mm256_or_si256(words, _mm256_and_si256(set, _mm256_set1_epi16(static_cast<int16_t>(0x8000))));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), words);
  return bits;
}

// Bits 1, 3, ..., 31 of m -> bits 0-15.
inline uint16_t oddBits(uint32_t m) {
  uint32_t x = (m >> 1) & 0x55555555u;
  x = (x | (x >> 1)) & 0x33333333u;
  x = (x | (x >> 2)) & 0x0f0f0f0fu;
  x = (x | (x >> 4)) & 0x00ff00ffu;
  x = (x | (x >> 8)) & 0x0000ffffu;
  return static_cast<uint16_t>(x);
}

// The inverse: 64 floats s * (c - 6) into r[0..7] (`fold` times them). A byte movemask
// gathers the words' top bits (the scale); v / 13 is mulhi(v, 40330) >> 3, exact for every
// v < 2^15 (40330 / 2^19 exceeds 1/13 by under 3e-7, and 32767 * 3e-7 < 1/13).
SKYTRAIN_AVX2 void restoreQ13Registers(const uint8_t* in, float fold, __m256* r) {
  const __m256i words = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
  const uint16_t scale = oddBits(static_cast<uint32_t>(_mm256_movemask_epi8(words)));
  const __m256 s = _mm256_set1_ps(scaleOf(scale) * fold);
  __m256i v = _mm256_and_si256(words, _mm256_set1_epi16(0x7fff));
  const __m256i offset = _mm256_set1_epi16(kQ13Levels);
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    __m256i digit = v;
    if (k < 3) {
      const __m256i quotient = _mm256_srli_epi16(_mm256_mulhi_epu16(v, _mm256_set1_epi16(static_cast<int16_t>(40330))), 3);
      digit = _mm256_sub_epi16(v, _mm256_mullo_epi16(quotient, _mm256_set1_epi16(13)));
      v = quotient;
    }
    digit = _mm256_sub_epi16(digit, offset);
    r[2 * k] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(digit))), s);
    r[2 * k + 1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(digit, 1))), s);
  }
}

// The kernels as compression/kernels/rotated_blocks.h drives them: a block's 32 bytes at 32 b.
struct Q13Kernels {
  static SKYTRAIN_AVX2 uint32_t quantise(const __m256* r, float fold, char* payload, int64_t, int64_t b) {
    return quantiseQ13Registers(r, fold, reinterpret_cast<uint8_t*>(payload) + b * kQ13BlockBytes);
  }
  static SKYTRAIN_AVX2 void restore(const char* payload, int64_t, int64_t b, float fold, __m256* r) {
    restoreQ13Registers(reinterpret_cast<const uint8_t*>(payload) + b * kQ13BlockBytes, fold, r);
  }
  static uint32_t encodePortable(const float* block, char* payload, int64_t, int64_t b) {
    return encodeBlockPortable(block, reinterpret_cast<uint8_t*>(payload) + b * kQ13BlockBytes);
  }
  static void decodePortable(const char* payload, int64_t, int64_t b, float* block) {
    decodeBlockPortable(reinterpret_cast<const uint8_t*>(payload) + b * kQ13BlockBytes, block);
  }
};

}  // namespace

const BlockFormat kQ13Format = {"q13", q13Size,
                                 rotated_blocks::encode<Q13Kernels>,         rotated_blocks::decode<Q13Kernels>,
                                 rotated_blocks::encodeResidual<Q13Kernels>, rotated_blocks::decodeResidual<Q13Kernels>};

CodecPtr makeQ13Codec(const std::string& argument, CodecPtr inner) {
  requireNoArgument("q13", argument, inner.get());
  return makeBlockCodec(kQ13Format);
}

}  // namespace skytrain::compression
