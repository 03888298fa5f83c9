// Codecs that condition on the token IDs of the micro-batch they carry. Both ends of a link
// from the first stage to the last hold those IDs without sending them: the first stage
// draws the micro-batch, and the last draws the same one for its targets. "<inner>+pred"
// (compression/codecs/predictive_codec.cpp) is one.
#pragma once

#include <string>

// Torch-free, so that job specs (daemon/protocol) can check where "+pred" may stand.
namespace at {
class Tensor;
}

namespace skytrain::compression {

class Codec;

class TokenConditioned {
 public:
  virtual ~TokenConditioned() = default;
  // The IDs [B, T] (integer, on the CPU) of the tensor [B, T, d] that the next encode or
  // decode carries. Both ends pass the same IDs in the same order of messages.
  virtual void setTokens(const at::Tensor& ids) = 0;
};

// The codec's TokenConditioned face, or null when it needs no token IDs.
TokenConditioned* tokenConditioned(Codec& codec);

// True when a codec of this spec needs the token IDs at both ends ("...+pred").
inline bool needsTokens(const std::string& spec) {
  const std::string suffix = "+pred";
  return spec.size() >= suffix.size() && spec.compare(spec.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace skytrain::compression
