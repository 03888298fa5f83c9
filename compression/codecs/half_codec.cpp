// "fp16" and "bf16": each element rounded to nearest in a 16-bit float. Error bound per
// element: |x| * 2^-11 (fp16) or |x| * 2^-8 (bf16) for normal values; fp16 also loses up to
// 2^-25 below its normal range and turns |x| > 65504 into Inf. NaN and Inf pass through.
// Size: numel * 2.
#include <torch/torch.h>

#include <cstring>

#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/tensor_bytes.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace skytrain::compression {
namespace {

#if defined(__x86_64__)
// F16C converts 8 floats a cycle; ATen's generic cast is ~3x slower here. Chosen at run
// time, so the binary still runs on CPUs without it.
bool haveF16c() {
  static const bool have = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return have;
}

__attribute__((target("avx,f16c"))) void floatsToHalves(const float* in, char* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  for (; i < n; ++i) {
    const uint16_t h = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

__attribute__((target("avx,f16c"))) void halvesToFloats(const char* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i))));
  }
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = _cvtsh_ss(h);
  }
}
#else
bool haveF16c() { return false; }
void floatsToHalves(const float*, char*, int64_t) {}
void halvesToFloats(const char*, float*, int64_t) {}
#endif

class HalfCodec : public Codec {
 public:
  HalfCodec(std::string name, c10::ScalarType wire) : name_(std::move(name)), wire_(wire) {}

  std::string spec() const override { return name_; }

  EncodedTensor encode(const at::Tensor& input) override {
    const at::Tensor x = floatInput(name_, input);
    EncodedTensor out = encodedHeader(name_, input);
    out.payload.resize(static_cast<size_t>(x.numel()) * 2);
    if (x.numel() == 0) return out;
    if (wire_ == torch::kHalf && haveF16c()) {
      floatsToHalves(x.data_ptr<float>(), out.payload.data(), x.numel());
    } else {
      torch::from_blob(out.payload.data(), {x.numel()}, wire_).copy_(x.view({-1}));
    }
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    const int64_t n = elementCount(encoded.shape);
    requirePayloadSize(name_, encoded, static_cast<size_t>(n) * 2);
    if (wire_ == torch::kHalf && haveF16c()) {
      at::Tensor out = torch::empty(encoded.shape, torch::kFloat);
      if (n > 0) halvesToFloats(encoded.payload.data(), out.data_ptr<float>(), n);
      return out.to(toScalarType(encoded.dtype));
    }
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
