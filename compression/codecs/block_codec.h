// The 64-block element codecs whose "+rot" form is fused ("int3", "q13"): each is a format
// of whole blocks (compression/kernels/rotated_blocks.h runs its kernels), and one Codec class
// serves all of them, alone and, through RotationCodec, rotated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "compression/codec.h"
#include "compression/kernels/prediction_kernels.h"

namespace skytrain::compression {

struct BlockFormat {
  const char* name;
  size_t (*size)(int64_t n);  // payload bytes of n floats
  // n floats into size(n) bytes, each 64-block rotated first when `rotate`; false when a
  // block holds NaN or Inf (or its rotation overflows).
  bool (*encode)(const float* data, int64_t n, bool rotate, char* payload);
  void (*decode)(const char* payload, int64_t n, bool rotate, float* out);  // size(n) bytes: the caller checks
  // "+pred"'s fused forms (compression/codecs/predictive_codec.cpp), for rows of a width d that is a
  // multiple of 64, on a CPU with AVX2 and FMA (fusesResidual): encode rows [first, end) of
  // `data` (which points at row first) less their prediction, x - (token + position), the
  // same bytes as encode() of that difference; decode() of such a payload plus the
  // prediction, r' + (token + position), the same floats as adding it afterwards. With
  // `learn`, each row's decoded residual r' is also added into its sums, as
  // prediction::accumulate adds it (the encoder restores r' from the bytes it just wrote).
  bool (*encodeResidual)(const prediction::Predictor& p, int64_t first, int64_t end, const float* data, bool rotate,
                         char* payload, const prediction::Sums* learn);
  void (*decodeResidual)(const char* payload, const prediction::Predictor& p, int64_t first, int64_t end, bool rotate,
                         float* out, const prediction::Sums* learn);
};

// Whether encodeResidual and decodeResidual take rows of width d on this CPU.
bool fusesResidual(int64_t d);

extern const BlockFormat kInt3Format;  // compression/codecs/int3_codec.cpp
extern const BlockFormat kQ13Format;   // compression/codecs/q13_codec.cpp

// The format whose name is `spec`, or null.
const BlockFormat* blockFormat(const std::string& spec);

// The format's payload of `x` (any floating dtype, on the CPU), rotated when `rotate`;
// throws skytrain::Error on NaN/Inf (naming `codec`).
std::string encodeBlocks(const BlockFormat& format, const std::string& codec, const at::Tensor& x, bool rotate);
// The inverse, float32 [n]; throws skytrain::WireError naming `codec` on a payload of the wrong size.
at::Tensor decodeBlocks(const BlockFormat& format, const std::string& codec, const EncodedTensor& encoded, bool rotate);

std::unique_ptr<Codec> makeBlockCodec(const BlockFormat& format);

}  // namespace skytrain::compression
