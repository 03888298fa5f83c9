// Fast absmax over float32 using the bit patterns: for |x| the IEEE bits order like
// unsigned integers, so the reduction vectorises without -ffast-math, and a result at or
// above kNonFiniteBits means the range held NaN or Inf.
#pragma once

#include <cstdint>
#include <cstring>

namespace skytrain::compression {

constexpr uint32_t kNonFiniteBits = 0x7f800000u;

// Largest |x| in [data, data + n) as float bits (sign cleared).
inline uint32_t absMaxBits(const float* data, int64_t n) {
  uint32_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, 4);
    bits &= 0x7fffffffu;
    best = bits > best ? bits : best;
  }
  return best;
}

// Round to nearest (even) for |v| < 2^22: adding 1.5 * 2^23 leaves the integer in the
// mantissa. Plain float add and integer subtract, so loops over it vectorise.
inline int32_t roundSmall(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return bits - 0x4B400000;
}

inline float bitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

}  // namespace skytrain::compression
