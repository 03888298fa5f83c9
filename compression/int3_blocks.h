// "int3" (compression/int3_codec.cpp) as raw kernels, shared with the fused "int3+rot"
// (compression/rotation_codec.cpp), which rotates and quantises a 64-block in registers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace skytrain::compression {

constexpr int64_t kInt3Block = 64;  // the rotation's block, so "int3+rot" needs no padding of its own
constexpr size_t kInt3BlockBytes = 4 + 3 * 8;  // a float32 scale, three 64-bit planes

inline int64_t int3Blocks(int64_t n) { return (n + kInt3Block - 1) / kInt3Block; }
// Payload bytes of n elements: every block's scale, then every block's three planes.
inline size_t int3Size(int64_t n) { return static_cast<size_t>(int3Blocks(n)) * kInt3BlockBytes; }

// The payload of n floats, each 64-block first rotated (H/8, compression/hadamard.h) when
// `rotate`; payload holds int3Size(n) bytes. False when a block holds NaN or Inf (or its
// rotation overflows): the payload then means nothing.
bool encodeInt3(const float* data, int64_t n, bool rotate, char* payload);
// The inverse: n floats from int3Size(n) bytes (the caller checks the size).
void decodeInt3(const char* payload, int64_t n, bool rotate, float* out);

}  // namespace skytrain::compression
