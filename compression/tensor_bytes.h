// Raw element bytes of a tensor and back, with the size checks every decoder needs.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "compression/wire/encoded_tensor.h"

namespace skytrain::compression {

WireDType toWireDType(c10::ScalarType type);  // throws skytrain::Error on unsupported types
c10::ScalarType toScalarType(WireDType type);  // throws skytrain::WireError on unknown codes
size_t elementSize(WireDType type);


// Number of elements of `shape`; throws skytrain::WireError on a negative dimension or an
// element count that would overflow.
int64_t elementCount(const std::vector<int64_t>& shape);

// The tensor's elements in row-major order (made contiguous on the CPU first).
std::string tensorBytes(const at::Tensor& tensor);

// A new CPU tensor of `dtype` and `shape` holding `bytes`; throws skytrain::WireError when
// bytes.size() is not exactly elementCount(shape) * elementSize(dtype).
at::Tensor tensorFromBytes(const std::string& bytes, WireDType dtype,
                           const std::vector<int64_t>& shape);

}  // namespace skytrain::compression
