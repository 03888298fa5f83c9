// Helpers shared by the codec implementations: argument checks, input checks, and the
// framing of a structural codec's parts inside one payload.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "compression/codec.h"

namespace skytrain::compression {

// Throws skytrain::Error when an element codec is given an argument or an inner codec.
void requireNoArgument(const std::string& codec, const std::string& argument, const Codec* inner);

// The input as contiguous float32 on the CPU; throws skytrain::Error on a non-floating
// tensor (naming the codec and the dtype).
at::Tensor floatInput(const std::string& codec, const at::Tensor& input);

// Throws skytrain::Error when `x` (float32, contiguous) holds NaN or Inf: quantising and
// factoring codecs have no representation for them.
void requireFinite(const std::string& codec, const at::Tensor& x);
// For an encoder that rotates and found a non-finite value: throws requireFinite's error, or,
// where every input is finite, says the rotation overflowed float32.
[[noreturn]] void throwNonFiniteOrOverflow(const std::string& codec, const at::Tensor& x);

// The metadata every encoder fills in from its input.
EncodedTensor encodedHeader(const std::string& spec, const at::Tensor& input);

// Throws skytrain::WireError unless payload.size() == expected.
void requirePayloadSize(const std::string& codec, const EncodedTensor& encoded, size_t expected);

// Parts layout: u32 count, then count u64 lengths, then the parts back to back.
std::string packParts(const std::vector<std::string>& parts);
// Throws skytrain::WireError unless the payload holds exactly `count` parts.
std::vector<std::string> unpackParts(const std::string& codec, const std::string& payload, size_t count);
constexpr size_t packedOverhead(size_t count) { return 4 + 8 * count; }

// Encodes / decodes a float part with a structural codec's inner codec.
std::string encodePart(Codec& inner, const at::Tensor& part);
at::Tensor decodePart(Codec& inner, std::string bytes, std::vector<int64_t> shape);

// "inner+name:arg", or "name:arg" when the inner codec is "none".
std::string chainSpec(const Codec& inner, const std::string& self);

// Parses a number in (low, high]; throws skytrain::Error naming the codec and the text.
double parseFraction(const std::string& codec, const std::string& text, double low, double high);

}  // namespace skytrain::compression
