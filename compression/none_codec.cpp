#include "compression/none_codec.h"

#include <cstring>

#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

class NoneCodec : public Codec {
 public:
  std::string spec() const override { return "none"; }

  EncodedTensor encode(const at::Tensor& input) override {
    EncodedTensor out;
    out.codec = spec();
    out.dtype = toWireDType(input.scalar_type());
    out.shape = input.sizes().vec();
    out.payload = tensorBytes(input);
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    return tensorFromBytes(encoded.payload, encoded.dtype, encoded.shape);
  }
};

}  // namespace

std::unique_ptr<Codec> makeNoneCodec(const std::string& argument) {
  if (!argument.empty()) throw Error("codec \"none\" takes no argument, got \"" + argument + "\"");
  return std::make_unique<NoneCodec>();
}

}  // namespace skytrain::compression
