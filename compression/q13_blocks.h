// "q13" (compression/q13_codec.cpp) as raw kernels, shared with the fused "q13+rot"
// (compression/rotation_codec.cpp), which rotates and quantises a 64-block in registers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace skytrain::compression {

constexpr int64_t kQ13Block = 64;        // the rotation's block, so "q13+rot" needs no padding of its own
constexpr size_t kQ13BlockBytes = 32;    // sixteen 16-bit words: 8x fewer bytes than float32
constexpr int kQ13Levels = 6;            // c - 6 in [-6, 6]: thirteen levels

inline int64_t q13Blocks(int64_t n) { return (n + kQ13Block - 1) / kQ13Block; }
inline size_t q13Size(int64_t n) { return static_cast<size_t>(q13Blocks(n)) * kQ13BlockBytes; }

// The payload of n floats, each 64-block first rotated (H/8, compression/hadamard.h) when
// `rotate`; payload holds q13Size(n) bytes. False when a block holds NaN or Inf (or its
// rotation overflows): the payload then means nothing.
bool encodeQ13(const float* data, int64_t n, bool rotate, char* payload);
// The inverse: n floats from q13Size(n) bytes (the caller checks the size). Any bytes decode
// to finite multiples (at most 8) of their block's scale, or NaN/Inf where the scale is.
void decodeQ13(const char* payload, int64_t n, bool rotate, float* out);

}  // namespace skytrain::compression
