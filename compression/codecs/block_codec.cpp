#include "compression/codecs/block_codec.h"

#include <torch/torch.h>

#include "compression/codec_util.h"
#include "compression/kernels/hadamard.h"
#include "compression/kernels/int4_avx2.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

namespace skytrain::compression {

const BlockFormat* blockFormat(const std::string& spec) {
  for (const BlockFormat* format : {&kInt3Format, &kQ13Format}) {
    if (spec == format->name) return format;
  }
  return nullptr;
}

bool fusesResidual(int64_t d) { return d > 0 && d % kRotationBlock == 0 && haveAvx2Fma(); }

std::string encodeBlocks(const BlockFormat& format, const std::string& codec, const at::Tensor& input, bool rotate) {
  const at::Tensor x = floatInput(codec, input);
  std::string payload(format.size(x.numel()), '\0');
  if (!format.encode(x.data_ptr<float>(), x.numel(), rotate, payload.data())) throwNonFiniteOrOverflow(codec, x);
  return payload;
}

at::Tensor decodeBlocks(const BlockFormat& format, const std::string& codec, const EncodedTensor& encoded,
                        bool rotate) {
  const int64_t n = elementCount(encoded.shape);
  requirePayloadSize(codec, encoded, format.size(n));
  at::Tensor out = torch::empty({n}, torch::kFloat);
  format.decode(encoded.payload.data(), n, rotate, out.data_ptr<float>());
  return out;
}

namespace {

class BlockCodec : public Codec {
 public:
  explicit BlockCodec(const BlockFormat& format) : format_(format) {}

  std::string spec() const override { return format_.name; }

  EncodedTensor encode(const at::Tensor& input) override {
    EncodedTensor out = encodedHeader(spec(), input);
    out.payload = encodeBlocks(format_, spec(), input, false);
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    return decodeBlocks(format_, spec(), encoded, false).view(encoded.shape).to(toScalarType(encoded.dtype));
  }

 private:
  const BlockFormat& format_;
};

}  // namespace

std::unique_ptr<Codec> makeBlockCodec(const BlockFormat& format) { return std::make_unique<BlockCodec>(format); }

}  // namespace skytrain::compression
