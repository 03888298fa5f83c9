#include "compression/tensor_bytes.h"

#include <torch/torch.h>

#include <cstring>
#include <limits>

#include "scheduler/error.h"

namespace skytrain::compression {

WireDType toWireDType(c10::ScalarType type) {
  switch (type) {
    case c10::kFloat: return WireDType::Float32;
    case c10::kHalf: return WireDType::Float16;
    case c10::kBFloat16: return WireDType::BFloat16;
    case c10::kLong: return WireDType::Int64;
    case c10::kInt: return WireDType::Int32;
    case c10::kChar: return WireDType::Int8;
    case c10::kByte: return WireDType::UInt8;
    default: throw Error(std::string("dtype not supported on the wire: ") + c10::toString(type));
  }
}

c10::ScalarType toScalarType(WireDType type) {
  switch (type) {
    case WireDType::Float32: return c10::kFloat;
    case WireDType::Float16: return c10::kHalf;
    case WireDType::BFloat16: return c10::kBFloat16;
    case WireDType::Int64: return c10::kLong;
    case WireDType::Int32: return c10::kInt;
    case WireDType::Int8: return c10::kChar;
    case WireDType::UInt8: return c10::kByte;
  }
  throw WireError("unknown wire dtype code " + std::to_string(static_cast<int>(type)));
}

size_t elementSize(WireDType type) { return c10::elementSize(toScalarType(type)); }

int64_t elementCount(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) throw WireError("negative dimension " + std::to_string(dim) + " in shape");
    if (dim != 0 && count > std::numeric_limits<int64_t>::max() / 16 / dim) {
      throw WireError("shape has too many elements");
    }
    count *= dim;
  }
  return count;
}

std::string tensorBytes(const at::Tensor& tensor) {
  const at::Tensor contiguous = tensor.detach().to(torch::kCPU).contiguous();
  const size_t size = contiguous.numel() * contiguous.element_size();
  std::string bytes(size, '\0');
  if (size > 0) std::memcpy(bytes.data(), contiguous.data_ptr(), size);
  return bytes;
}

at::Tensor tensorFromBytes(const std::string& bytes, WireDType dtype,
                           const std::vector<int64_t>& shape) {
  const int64_t count = elementCount(shape);
  const size_t expected = static_cast<size_t>(count) * elementSize(dtype);
  if (bytes.size() != expected) {
    throw WireError("payload is " + std::to_string(bytes.size()) + " bytes, shape needs " +
                    std::to_string(expected));
  }
  at::Tensor out = torch::empty(shape, torch::TensorOptions().dtype(toScalarType(dtype)));
  if (expected > 0) std::memcpy(out.data_ptr(), bytes.data(), expected);
  return out;
}

}  // namespace skytrain::compression
