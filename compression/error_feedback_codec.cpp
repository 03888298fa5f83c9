// "ef(<spec>)": error feedback around any codec. Each encode adds the stream's residual —
// what the previous message lost, input minus its decoding — before encoding, so errors do
// not accumulate over steps. The residual resets when the tensor's shape changes. Decoding
// is the inner codec's. Error bound and size: the inner codec's, on input + residual.
#include <torch/torch.h>

#include "compression/codec_util.h"
#include "compression/codecs.h"

namespace skytrain::compression {
namespace {

class ErrorFeedbackCodec : public Codec {
 public:
  explicit ErrorFeedbackCodec(CodecPtr inner) : inner_(std::move(inner)) {}

  std::string spec() const override { return "ef(" + inner_->spec() + ")"; }

  EncodedTensor encode(const at::Tensor& input) override {
    at::Tensor x = floatInput("ef", input);
    if (residual_.defined() && residual_.sizes() == x.sizes()) x = x + residual_;
    EncodedTensor encoded = inner_->encode(x);
    residual_ = x - inner_->decode(encoded).to(torch::kFloat);
    encoded.codec = spec();
    encoded.dtype = encodedHeader(spec(), input).dtype;
    return encoded;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    EncodedTensor inner = encoded;
    inner.codec = inner_->spec();
    return inner_->decode(inner);
  }

 private:
  CodecPtr inner_;
  at::Tensor residual_;  // float32, the shape of the last input
};

}  // namespace

CodecPtr makeErrorFeedbackCodec(CodecPtr inner) { return std::make_unique<ErrorFeedbackCodec>(std::move(inner)); }

}  // namespace skytrain::compression
