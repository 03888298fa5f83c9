// "tokens": token IDs with per-token 0/1 labels, for links that carry no activations (an
// ELECTRA generator's corrupted sequence and its replaced-token labels). The input is an
// integer tensor [..., C]: channel 0 holds the IDs (>= 0), channels 1..C-1 labels in {0, 1}.
// Payload: u8 width W (1, 2 or 4: the smallest unsigned type holding the largest ID), the
// n IDs as W-byte little-endian integers, then the n(C-1) labels bit-packed, 8 to a byte,
// in element order. Error bound: 0 (lossless). Size: 1 + nW + ceil(n(C-1)/8) for n tokens.
// Refused at encode: floating input, a negative ID, an ID over 2^32 - 1, a label not 0 or 1.
#include <torch/torch.h>

#include <cstring>

#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

class TokenCodec : public Codec {
 public:
  std::string spec() const override { return "tokens"; }

  EncodedTensor encode(const at::Tensor& input) override {
    if (input.is_floating_point() || input.dim() < 1 || input.size(-1) < 1) {
      throw Error("tokens: expects an integer tensor [..., 1 + labels], got " + std::string(c10::toString(input.scalar_type())) +
                  " " + c10::str(input.sizes()));
    }
    EncodedTensor out = encodedHeader(spec(), input);
    const at::Tensor x = input.to(torch::kLong).contiguous().reshape({-1, input.size(-1)});
    const int64_t n = x.size(0), channels = x.size(1);
    const at::Tensor ids = x.select(1, 0).contiguous();
    const int64_t low = n ? ids.min().item<int64_t>() : 0, high = n ? ids.max().item<int64_t>() : 0;
    if (low < 0 || high > 0xffffffffLL) throw Error("tokens: IDs must lie in [0, 2^32), got [" + std::to_string(low) + ", " + std::to_string(high) + "]");
    const int width = high < 256 ? 1 : high < 65536 ? 2 : 4;
    const int64_t labels = n * (channels - 1);
    out.payload.assign(1 + n * width + (labels + 7) / 8, '\0');
    auto* bytes = reinterpret_cast<uint8_t*>(out.payload.data());
    bytes[0] = static_cast<uint8_t>(width);
    const int64_t* id = ids.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t v = static_cast<uint32_t>(id[i]);
      for (int b = 0; b < width; ++b) bytes[1 + i * width + b] = static_cast<uint8_t>(v >> (8 * b));
    }
    if (labels > 0) {
      const at::Tensor flags = x.narrow(1, 1, channels - 1).contiguous();
      if (flags.min().item<int64_t>() < 0 || flags.max().item<int64_t>() > 1) throw Error("tokens: labels must be 0 or 1");
      const int64_t* f = flags.data_ptr<int64_t>();
      uint8_t* packed = bytes + 1 + n * width;
      for (int64_t i = 0; i < labels; ++i) packed[i / 8] |= static_cast<uint8_t>(f[i] << (i % 8));
    }
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    const int64_t total = elementCount(encoded.shape);
    if (encoded.shape.empty() || encoded.shape.back() < 1) throw WireError("tokens: a frame needs a last dimension >= 1");
    const int64_t channels = encoded.shape.back(), n = total / channels;
    if (encoded.payload.empty()) throw WireError("tokens: empty payload");
    const auto* bytes = reinterpret_cast<const uint8_t*>(encoded.payload.data());
    const int width = bytes[0];
    if (width != 1 && width != 2 && width != 4) throw WireError("tokens: ID width " + std::to_string(width) + " is not 1, 2 or 4");
    const int64_t labels = n * (channels - 1);
    requirePayloadSize("tokens", encoded, static_cast<size_t>(1 + n * width + (labels + 7) / 8));
    at::Tensor out = torch::empty({n, channels}, torch::kLong);
    int64_t* o = out.data_ptr<int64_t>();
    const uint8_t* packed = bytes + 1 + n * width;
    int64_t label = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v = 0;
      for (int b = 0; b < width; ++b) v |= static_cast<uint32_t>(bytes[1 + i * width + b]) << (8 * b);
      o[i * channels] = v;
      for (int64_t c = 1; c < channels; ++c, ++label) o[i * channels + c] = (packed[label / 8] >> (label % 8)) & 1;
    }
    return out.reshape(encoded.shape).to(toScalarType(encoded.dtype));
  }
};

}  // namespace

CodecPtr makeTokenCodec(const std::string& argument, CodecPtr inner) {
  requireNoArgument("tokens", argument, inner.get());
  return std::make_unique<TokenCodec>();
}

}  // namespace skytrain::compression
