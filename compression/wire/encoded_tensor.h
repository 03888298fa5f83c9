// A tensor as it crosses the wire: element type, shape, codec spec and codec bytes.
// Pure C++ (no Torch) so the frame format and its tests stay light.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace skytrain::compression {

// Element type of the tensor a frame restores to, as written on the wire.
enum class WireDType : uint8_t {
  Float32 = 1,
  Float16 = 2,
  BFloat16 = 3,
  Int64 = 4,
  Int32 = 5,
  Int8 = 6,
  UInt8 = 7,
};

struct EncodedTensor {
  std::string codec;                     // canonical codec spec, e.g. "none"
  WireDType dtype = WireDType::Float32;  // dtype of the decoded tensor
  std::vector<int64_t> shape;            // shape of the decoded tensor
  std::string payload;                   // codec-specific bytes
};

}  // namespace skytrain::compression
