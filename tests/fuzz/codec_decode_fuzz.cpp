// Every registered codec's decode (compression/codec.h) on any payload for a given small
// shape (layout: codec_input.h): the payload is refused with skytrain::Error or decoded
// to a tensor of exactly that shape and dtype.
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compression/codec_registry.h"
#include "compression/side_tokens.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"
#include "tests/fuzz/codec_input.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace skytrain;

// One codec per spec, built once (only "+pred" keeps decoding state: its tables, which any
// payload may move).
std::vector<std::unique_ptr<compression::Codec>>& codecs() {
  static std::vector<std::unique_ptr<compression::Codec>> all = [] {
    std::vector<std::unique_ptr<compression::Codec>> out;
    for (const auto& spec : fuzz::kCodecSpecs) out.push_back(compression::builtinCodecs().make(spec));
    return out;
  }();
  return all;
}

// A codec added to the registry must be added to kCodecSpecs too.
void checkEveryCodecListed() {
  for (const auto& name : compression::builtinCodecs().names()) {
    bool listed = false;
    for (const auto& spec : fuzz::kCodecSpecs) listed = listed || spec.find(name) != std::string::npos;
    FUZZ_REQUIRE(listed, "codec \"" + name + "\" is registered but not in tests/fuzz/codec_input.h");
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);  // decoding is small here; threads only add noise
  checkEveryCodecListed();
  codecs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = fuzz::readCodecInput(data, size);
  if (!input) return 0;
  compression::Codec& codec = *codecs()[input->codec];
  compression::EncodedTensor encoded;
  encoded.codec = codec.spec();
  encoded.dtype = input->dtype;
  encoded.shape = input->shape;
  encoded.payload = input->payload;
  if (auto* conditioned = compression::tokenConditioned(codec)) {
    // Token IDs as the receiving stage would pass them: [B, T] of a [B, T, d] tensor (a
    // shape of another rank gets [1, 1], which decode refuses).
    const bool batched = input->shape.size() == 3;
    const int64_t b = batched ? input->shape[0] : 1, t = batched ? input->shape[1] : 1;
    conditioned->setTokens(torch::arange(b * t, torch::kLong).remainder(11).reshape({b, t}));
  }
  at::Tensor out;
  try {
    out = codec.decode(encoded);
  } catch (const Error&) {
    return 0;
  }
  FUZZ_REQUIRE(out.defined(), encoded.codec + " decoded to an undefined tensor");
  const std::string what = encoded.codec + " decoded shape " + c10::str(input->shape) + " as " + c10::str(out.sizes()) +
                           " " + c10::toString(out.scalar_type());
  FUZZ_REQUIRE(out.sizes().vec() == input->shape, what);
  FUZZ_REQUIRE(out.scalar_type() == compression::toScalarType(input->dtype), what);
  return 0;
}
