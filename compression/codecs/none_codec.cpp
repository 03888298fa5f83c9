// "none": the tensor's raw bytes. Error bound: 0 (bit-exact, NaN and Inf included).
// Size: numel * element size.
#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/tensor_bytes.h"

namespace skytrain::compression {
namespace {

class NoneCodec : public Codec {
 public:
  std::string spec() const override { return "none"; }

  EncodedTensor encode(const at::Tensor& input) override {
    EncodedTensor out = encodedHeader(spec(), input);
    out.payload = tensorBytes(input);
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    return tensorFromBytes(encoded.payload, encoded.dtype, encoded.shape);
  }
};

}  // namespace

CodecPtr makeNoneCodec(const std::string& argument, CodecPtr inner) {
  requireNoArgument("none", argument, inner.get());
  return std::make_unique<NoneCodec>();
}

}  // namespace skytrain::compression
