// The Codec interface: how a tensor is made small for the wire and restored on the far side.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compression/encoded_tensor.h"

namespace skytrain::compression {

// Contract: decode(encode(t)) has t's shape and dtype; the error bound is the codec's own
// and is documented on its implementation. encode accepts any layout (it makes its input
// contiguous). decode validates the payload size and throws skytrain::WireError on a
// truncated or corrupted payload, never reading out of bounds. Codecs may keep state
// (error feedback), so one instance serves one stream and is not thread-safe.
class Codec {
 public:
  virtual ~Codec() = default;
  virtual std::string spec() const = 0;  // canonical spec string, parseable again
  virtual EncodedTensor encode(const at::Tensor& input) = 0;
  virtual at::Tensor decode(const EncodedTensor& encoded) = 0;
};

}  // namespace skytrain::compression
