// "fp16" and "bf16": each element rounded to nearest in a 16-bit float. Error bound per
// element: |x| * 2^-11 (fp16) or |x| * 2^-8 (bf16) for normal values; fp16 also loses up to
// 2^-25 below its normal range and turns |x| > 65504 into Inf. NaN and Inf pass through.
// Size: numel * 2.
#include <torch/torch.h>

#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/tensor_bytes.h"

namespace skytrain::compression {
namespace {

class HalfCodec : public Codec {
 public:
  HalfCodec(std::string name, c10::ScalarType wire) : name_(std::move(name)), wire_(wire) {}

  std::string spec() const override { return name_; }

  EncodedTensor encode(const at::Tensor& input) override {
    const at::Tensor x = floatInput(name_, input);
    EncodedTensor out = encodedHeader(name_, input);
    out.payload.resize(static_cast<size_t>(x.numel()) * 2);
    if (x.numel() > 0) torch::from_blob(out.payload.data(), {x.numel()}, wire_).copy_(x.view({-1}));
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    const int64_t n = elementCount(encoded.shape);
    requirePayloadSize(name_, encoded, static_cast<size_t>(n) * 2);
    at::Tensor out = torch::empty(encoded.shape, torch::dtype(toScalarType(encoded.dtype)));
    if (n > 0) {
      auto* data = const_cast<char*>(encoded.payload.data());
      out.view({-1}).copy_(torch::from_blob(data, {n}, wire_));
    }
    return out;
  }

 private:
  std::string name_;
  c10::ScalarType wire_;
};

}  // namespace

CodecPtr makeFp16Codec(const std::string& argument, CodecPtr inner) {
  requireNoArgument("fp16", argument, inner.get());
  return std::make_unique<HalfCodec>("fp16", torch::kHalf);
}

CodecPtr makeBf16Codec(const std::string& argument, CodecPtr inner) {
  requireNoArgument("bf16", argument, inner.get());
  return std::make_unique<HalfCodec>("bf16", torch::kBFloat16);
}

}  // namespace skytrain::compression
