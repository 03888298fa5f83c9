// "int8": per-row absmax quantisation; a row is the last dimension. Each row sends one
// float32 scale s = absmax/127 and one int8 per element, q = round(x/s). Error bound per
// element: |x - s*q| <= absmax(row)/254; an all-zero row decodes to exact zeros. NaN/Inf
// inputs are refused (skytrain::Error). Size: rows * 4 + numel.
#include <torch/torch.h>

#include <cmath>
#include <cstring>

#include "compression/codec_util.h"
#include "compression/kernels/float_bits.h"
#include "compression/codecs.h"
#include "compression/tensor_bytes.h"

namespace skytrain::compression {
namespace {

int64_t rowLength(const std::vector<int64_t>& shape) { return shape.empty() ? 1 : shape.back(); }

// Quantises one row; returns its absmax as float bits. Built for AVX2 and for the baseline,
// the loader picks one (ifunc), so the binary runs on any x86-64.
__attribute__((target_clones("avx2", "default"))) uint32_t quantiseRow(const float* row, int64_t cols, int8_t* q) {
  const uint32_t bits = absMaxBits(row, cols);
  const float absmax = bitsToFloat(bits);
  const float inverse = absmax > 0.f && bits < kNonFiniteBits ? 127.f / absmax : 0.f;
  for (int64_t c = 0; c < cols; ++c) q[c] = static_cast<int8_t>(roundSmall(row[c] * inverse));
  return bits;
}

class Int8Codec : public Codec {
 public:
  std::string spec() const override { return "int8"; }

  EncodedTensor encode(const at::Tensor& input) override {
    const at::Tensor x = floatInput("int8", input);
    EncodedTensor out = encodedHeader(spec(), input);
    const int64_t n = x.numel(), cols = rowLength(out.shape), rows = cols == 0 ? 0 : n / cols;
    out.payload.resize(static_cast<size_t>(rows * 4 + n));
    char* scales = out.payload.data();  // float32 each, unaligned: copied with memcpy
    auto* q = reinterpret_cast<int8_t*>(out.payload.data() + rows * 4);
    const float* data = x.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = data + r * cols;
      const uint32_t bits = quantiseRow(row, cols, q + r * cols);
      if (bits >= kNonFiniteBits) requireFinite("int8", x);  // throws, counting them
      const float absmax = bitsToFloat(bits);
      const float scale = absmax / 127.f;
      std::memcpy(scales + 4 * r, &scale, 4);
    }
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    const int64_t n = elementCount(encoded.shape), cols = rowLength(encoded.shape), rows = cols == 0 ? 0 : n / cols;
    requirePayloadSize("int8", encoded, static_cast<size_t>(rows * 4 + n));
    at::Tensor out = torch::empty({n}, torch::kFloat);
    const char* scales = encoded.payload.data();
    const auto* q = reinterpret_cast<const int8_t*>(encoded.payload.data() + rows * 4);
    float* data = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
      float scale;
      std::memcpy(&scale, scales + 4 * r, 4);
      for (int64_t c = 0; c < cols; ++c) data[r * cols + c] = scale * q[r * cols + c];
    }
    return out.view(encoded.shape).to(toScalarType(encoded.dtype));
  }
};

}  // namespace

CodecPtr makeInt8Codec(const std::string& argument, CodecPtr inner) {
  requireNoArgument("int8", argument, inner.get());
  return std::make_unique<Int8Codec>();
}

}  // namespace skytrain::compression
