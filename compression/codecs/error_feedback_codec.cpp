// "ef(<spec>)": error feedback around any codec. Each encode adds the stream's residual —
// what the previous message lost, input minus its decoding — before encoding, so errors do
// not accumulate over steps. The residual resets when the tensor's shape changes. Decoding
// is the inner codec's. Error bound and size: the inner codec's, on input + residual.
#include <torch/torch.h>

#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

class ErrorFeedbackCodec : public Codec {
 public:
  explicit ErrorFeedbackCodec(CodecPtr inner) : inner_(std::move(inner)) {}

  std::string spec() const override { return "ef(" + inner_->spec() + ")"; }

  // The sum and the residual live in buffers kept from message to message (a stream's
  // tensors keep their shape): no fresh allocations of the tensor's size on each encode.
  EncodedTensor encode(const at::Tensor& input) override {
    at::Tensor x = floatInput("ef", input);
    const bool continues = residual_.defined() && residual_.sizes() == x.sizes();
    if (continues) {
      if (!sum_.defined() || sum_.sizes() != x.sizes()) sum_ = torch::empty_like(x);
      at::add_out(sum_, x, residual_);
      x = sum_;
    } else {
      residual_ = torch::empty_like(x);
    }
    EncodedTensor encoded = inner_->encode(x);
    at::sub_out(residual_, x, inner_->decode(encoded).to(torch::kFloat));
    encoded.codec = spec();
    encoded.dtype = encodedHeader(spec(), input).dtype;
    return encoded;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    EncodedTensor inner = encoded;
    inner.codec = inner_->spec();
    return inner_->decode(inner);
  }

  CodecState state() const override {
    CodecState out = prefixedState("inner.", inner_->state());
    if (residual_.defined()) out.emplace_back("residual", residual_.clone());  // the buffer changes in place
    return out;
  }

  void loadState(const CodecState& state) override {
    residual_ = at::Tensor();
    for (const auto& [name, tensor] : state) {
      if (name == "residual") {
        if (tensor.scalar_type() != torch::kFloat) throw WireError("ef: residual is not float32");
        residual_ = tensor.clone();
      } else if (name.rfind("inner.", 0) != 0) {
        throw WireError("ef: unexpected state \"" + name + "\"");
      }
    }
    inner_->loadState(stateUnder("inner.", state));
  }

 private:
  CodecPtr inner_;
  at::Tensor residual_;  // float32, the shape of the last input
  at::Tensor sum_;       // input + residual, the buffer for it
};

}  // namespace

CodecPtr makeErrorFeedbackCodec(CodecPtr inner) { return std::make_unique<ErrorFeedbackCodec>(std::move(inner)); }

}  // namespace skytrain::compression
