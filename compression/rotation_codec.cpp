// "rot" (right of '+', like a structural codec): a Hadamard rotation in front of the codec
// left of it: "int4+rot", "ef(int4+rot)". The flattened tensor is cut into blocks of 64
// (the last zero-padded) and each block multiplied by the orthonormal 64x64 Walsh-Hadamard
// matrix H/8 (a fast transform: 6 butterfly passes); the inner codec encodes the rotated
// [ceil(n/64)*64] vector, and the receiver rotates back (H/8 is its own inverse). A block's
// energy is spread over all 64 entries, so an outlier no longer sets a whole quantisation
// block's scale (the idea of QuaRot and TAH-Quant for low-bit activations).
//
// Error bound: the rotation is exact to float32 rounding and preserves the L2 norm, so a
// block's error is the inner codec's error on the rotated block: for "int4+rot",
// |x_i - x'_i| <= ||error of the block||_2 <= 8 * max|y| / 14 <= 8/14 * ||x_block||_2.
// NaN/Inf are refused. Size: the inner codec's for ceil(n/64)*64 elements.
#include <torch/torch.h>

#include <cstring>

#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

constexpr int64_t kRotationBlock = 64;

int64_t paddedLength(int64_t n) { return (n + kRotationBlock - 1) / kRotationBlock * kRotationBlock; }

// In-place orthonormal Walsh-Hadamard transform of `blocks` consecutive 64-blocks. Each
// pass pairs elements h apart; fixed trip counts so the loops vectorise (AVX2 where the
// CPU has it, chosen at load time).
__attribute__((target_clones("avx2", "default"))) void hadamard(float* data, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b) {
    float* x = data + b * kRotationBlock;
    for (int h = 1; h < kRotationBlock; h *= 2) {
      for (int i = 0; i < kRotationBlock; i += 2 * h) {
        for (int j = i; j < i + h; ++j) {
          const float a = x[j], c = x[j + h];
          x[j] = a + c;
          x[j + h] = a - c;
        }
      }
    }
    for (int i = 0; i < kRotationBlock; ++i) x[i] *= 0.125f;  // 1/sqrt(64)
  }
}

class RotationCodec : public Codec {
 public:
  explicit RotationCodec(CodecPtr inner) : inner_(std::move(inner)) {}

  std::string spec() const override { return chainSpec(*inner_, "rot"); }

  EncodedTensor encode(const at::Tensor& input) override {
    const at::Tensor x = floatInput("rot", input);
    requireFinite("rot", x);
    const int64_t n = x.numel(), padded = paddedLength(n);
    at::Tensor rotated = torch::zeros({padded});
    std::memcpy(rotated.data_ptr<float>(), x.data_ptr<float>(), sizeof(float) * static_cast<size_t>(n));
    hadamard(rotated.data_ptr<float>(), padded / kRotationBlock);
    EncodedTensor out = encodedHeader(spec(), input);
    out.payload = encodePart(*inner_, rotated);
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    const int64_t n = elementCount(encoded.shape), padded = paddedLength(n);
    at::Tensor rotated = decodePart(*inner_, encoded.payload, {padded}).to(torch::kFloat).contiguous();
    hadamard(rotated.data_ptr<float>(), padded / kRotationBlock);
    return rotated.narrow(0, 0, n).view(encoded.shape).to(toScalarType(encoded.dtype));
  }

  CodecState state() const override { return prefixedState("inner.", inner_->state()); }
  void loadState(const CodecState& state) override {
    for (const auto& entry : state) {
      if (entry.first.rfind("inner.", 0) != 0) throw WireError("rot: unexpected state \"" + entry.first + "\"");
    }
    inner_->loadState(stateUnder("inner.", state));
  }

 private:
  CodecPtr inner_;
};

}  // namespace

CodecPtr makeRotationCodec(const std::string& argument, CodecPtr inner) {
  if (!argument.empty()) throw Error("codec \"rot\" takes no argument, got \"" + argument + "\"");
  return std::make_unique<RotationCodec>(inner ? std::move(inner) : makeNoneCodec("", nullptr));
}

}  // namespace skytrain::compression
