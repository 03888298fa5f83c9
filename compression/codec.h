// The Codec interface: how a tensor is made small for the wire and restored on the far side.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compression/wire/encoded_tensor.h"

namespace skytrain::compression {

// Contract: decode(encode(t)) has t's shape and dtype; the error bound is the codec's own
// and is documented on its implementation. encode accepts any layout (it makes its input
// contiguous). decode validates the payload size and throws skytrain::WireError on a
// truncated or corrupted payload, never reading out of bounds. Codecs may keep state
// (error feedback), so one instance serves one stream and is not thread-safe.
// What a codec's next encode depends on besides its input (error-feedback residuals,
// random generators): named tensors, saved in checkpoints so a resumed run encodes exactly
// as an uninterrupted one.
using CodecState = std::vector<std::pair<std::string, at::Tensor>>;

class Codec {
 public:
  virtual ~Codec() = default;
  virtual std::string spec() const = 0;  // canonical spec string, parseable again
  virtual EncodedTensor encode(const at::Tensor& input) = 0;
  virtual at::Tensor decode(const EncodedTensor& encoded) = 0;
  // Stateless codecs keep the defaults. loadState takes what state() of the same spec
  // returned (names may be absent: a stream that has not encoded yet); it throws
  // skytrain::WireError on a name or tensor it does not expect.
  virtual CodecState state() const { return {}; }
  virtual void loadState(const CodecState& state);
};

// Adds `prefix` to each name of an inner codec's state / takes the entries under it.
CodecState prefixedState(const std::string& prefix, const CodecState& state);
CodecState stateUnder(const std::string& prefix, const CodecState& state);

}  // namespace skytrain::compression
