// decodeSafetensors (stages/weights/safetensors.h) on any bytes: a file is refused with
// skytrain::Error or decoded, and what decodes survives a round trip: encodeSafetensors of
// the result decodes to the same names, dtypes, shapes, bytes and metadata, and encoding
// that again gives the same bytes.
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "scheduler/error.h"
#include "stages/weights/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace skytrain;
using stages::SafeTensors;

// The tensor's bytes as integers of its element size: torch::equal on these compares bytes,
// where on floats it would call two NaNs different.
at::Tensor asBits(const at::Tensor& t) {
  switch (t.element_size()) {
    case 8: return t.view(at::kLong);
    case 4: return t.view(at::kInt);
    case 2: return t.view(at::kShort);
    default: return t.view(at::kByte);
  }
}

void checkSame(const SafeTensors& decoded, const SafeTensors& again) {
  FUZZ_REQUIRE(again.tensors.size() == decoded.tensors.size(), std::to_string(again.tensors.size()));
  for (size_t i = 0; i < decoded.tensors.size(); ++i) {
    const auto& [name, tensor] = decoded.tensors[i];
    const auto& [nameAgain, tensorAgain] = again.tensors[i];
    const std::string what = "tensor \"" + name + "\" came back as \"" + nameAgain + "\" " +
                             c10::toString(tensorAgain.scalar_type()) + " " + c10::str(tensorAgain.sizes());
    FUZZ_REQUIRE(nameAgain == name, what);
    FUZZ_REQUIRE(tensorAgain.scalar_type() == tensor.scalar_type(), what);
    FUZZ_REQUIRE(tensorAgain.sizes() == tensor.sizes(), what);
    FUZZ_REQUIRE(torch::equal(asBits(tensorAgain), asBits(tensor)), what + ": other bytes");
  }
  FUZZ_REQUIRE(again.metadata == decoded.metadata, std::to_string(again.metadata.size()) + " metadata entries");
}

// A refusal of our own encoding is a failed property, not a refusal of the input.
SafeTensors decodeOwn(const std::string& bytes) {
  try {
    return stages::decodeSafetensors(bytes, "re-encoded");
  } catch (const Error& e) {
    FUZZ_REQUIRE(false, std::string("encodeSafetensors wrote a file decodeSafetensors refuses: ") + e.what());
  }
  return {};
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);  // the tensors are small; threads only add noise
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SafeTensors decoded;
  try {
    decoded = stages::decodeSafetensors(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const Error&) {
    return 0;
  }
  const std::string encoded = stages::encodeSafetensors(decoded);
  checkSame(decoded, decodeOwn(encoded));
  FUZZ_REQUIRE(stages::encodeSafetensors(decodeOwn(encoded)) == encoded, "a second encoding differs from the first");
  return 0;
}
