// int4's block kernels ("int4": compression/codecs/int4_codec.cpp), shared with the fused path of
// "int4+rot" (compression/codecs/rotation_codec.cpp), which rotates and quantises a block at a time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace skytrain::compression {

constexpr int64_t kInt4Block = 32;

inline int64_t int4Blocks(int64_t n) { return (n + kInt4Block - 1) / kInt4Block; }
// Payload bytes of n elements: a float32 scale per block, then two elements a byte.
inline size_t int4Size(int64_t n) { return static_cast<size_t>(int4Blocks(n) * 4 + (n + 1) / 2); }

// Quantises kInt4Block floats into kInt4Block / 2 bytes; returns the block's absmax as
// float bits (>= kNonFiniteBits: the block held NaN or Inf, and the bytes mean nothing).
uint32_t encodeInt4Block(const float* x, uint8_t* packed);
// Restores kInt4Block floats from kInt4Block / 2 bytes and the block's scale (absmax / 7).
void decodeInt4Block(const uint8_t* packed, float scale, float* out);

}  // namespace skytrain::compression
