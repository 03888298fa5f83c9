// "zstd" (standing right of '+', like a structural codec): lossless general-purpose
// compression of the payload of the codec left of it ("none" when alone): "zstd",
// "int8+zstd", "tokens+zstd". Error bound: the inner codec's. Size: zstd's (level 3) of the
// inner payload; never more than that payload plus zstd's frame overhead.
// Decoding refuses a frame whose declared content size exceeds what the inner codec could
// need for the frame's shape (2x the raw tensor plus 64 KiB), before allocating.
#include <zstd.h>

#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

constexpr int kLevel = 3;

class ZstdCodec : public Codec {
 public:
  explicit ZstdCodec(CodecPtr inner) : inner_(std::move(inner)) {}

  std::string spec() const override { return chainSpec(*inner_, "zstd"); }

  EncodedTensor encode(const at::Tensor& input) override {
    EncodedTensor out = inner_->encode(input);
    std::string packed(ZSTD_compressBound(out.payload.size()), '\0');
    const size_t size = ZSTD_compress(packed.data(), packed.size(), out.payload.data(), out.payload.size(), kLevel);
    if (ZSTD_isError(size)) throw Error(std::string("zstd: ") + ZSTD_getErrorName(size));
    packed.resize(size);
    out.payload = std::move(packed);
    out.codec = spec();
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    const uint64_t declared = ZSTD_getFrameContentSize(encoded.payload.data(), encoded.payload.size());
    if (declared == ZSTD_CONTENTSIZE_ERROR || declared == ZSTD_CONTENTSIZE_UNKNOWN) {
      throw WireError("zstd: the payload is not a zstd frame with its content size");
    }
    const uint64_t raw = static_cast<uint64_t>(elementCount(encoded.shape)) * elementSize(encoded.dtype);
    if (declared > 2 * raw + (64 << 10)) {
      throw WireError("zstd: the frame declares " + std::to_string(declared) + " bytes, more than a tensor of its shape needs");
    }
    EncodedTensor inner = encoded;
    inner.payload.assign(declared, '\0');
    const size_t size = ZSTD_decompress(inner.payload.data(), inner.payload.size(), encoded.payload.data(), encoded.payload.size());
    if (ZSTD_isError(size) || size != declared) throw WireError("zstd: corrupted payload");
    inner.codec = inner_->spec();
    return inner_->decode(inner);
  }

  CodecState state() const override { return inner_->state(); }
  void loadState(const CodecState& state) override { inner_->loadState(state); }

 private:
  CodecPtr inner_;
};

}  // namespace

CodecPtr makeZstdCodec(const std::string& argument, CodecPtr inner) {
  if (!argument.empty()) throw Error("zstd takes no argument");
  return std::make_unique<ZstdCodec>(inner ? std::move(inner) : makeNoneCodec("", nullptr));
}

}  // namespace skytrain::compression
