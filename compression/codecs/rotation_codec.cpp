// "rot" (right of '+', like a structural codec): a Hadamard rotation in front of the codec
// left of it: "int4+rot", "int3+rot", "q13+rot", "ef(int4+rot)". The flattened tensor is cut into blocks of 64
// (the last zero-padded) and each block multiplied by the orthonormal 64x64 Walsh-Hadamard
// matrix H/8 (a fast transform: 6 butterfly passes); the inner codec encodes the rotated
// [ceil(n/64)*64] vector, and the receiver rotates back (H/8 is its own inverse). A block's
// energy is spread over all 64 entries, so an outlier no longer sets a whole quantisation
// block's scale (the idea of QuaRot and TAH-Quant for low-bit activations).
//
// Error bound: the rotation is exact to float32 rounding and preserves the L2 norm, so a
// block's error is the inner codec's error on the rotated block: for "int4+rot",
// |x_i - x'_i| <= ||error of the block||_2 <= 8 * max|y| / 14 <= 8/14 * ||x_block||_2;
// for "int3+rot", 8/6 * ||x_block||_2; for "q13+rot", 8/12 * (1 + 2^-7) * ||x_block||_2.
// NaN/Inf are refused. Size: the inner codec's for ceil(n/64)*64 elements.
#include <immintrin.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>

#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/kernels/float_bits.h"
#include "compression/kernels/hadamard.h"
#include "compression/codecs/block_codec.h"
#include "compression/kernels/int4_avx2.h"
#include "compression/kernels/int4_blocks.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

// In-place orthonormal Walsh-Hadamard transform of `blocks` consecutive 64-blocks: six
// butterfly passes (elements h = 1, 2, ..., 32 apart), then a scale by 1/8.
void hadamardPortable(float* data, int64_t blocks) {
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
    for (int i = 0; i < kRotationBlock; ++i) x[i] *= 0.125f;
  }
}

__attribute__((target("avx2,fma"))) void hadamardAvx2(float* data, int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b) {
    float* x = data + b * kRotationBlock;
    __m256 r[8];
    for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(x + 8 * k);
    hadamardRegistersUnscaled(r);
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(x + 8 * k, _mm256_mul_ps(r[k], _mm256_set1_ps(0.125f)));
  }
}

}  // namespace

void hadamard(float* data, int64_t blocks) {
  haveAvx2Fma() ? hadamardAvx2(data, blocks) : hadamardPortable(data, blocks);
}

namespace {

// "int4+rot" over whole 64-blocks, four at a time (blocks: a multiple of kRotationGroup):
// rotate in registers, quantise straight into the payload. The eight 32-halves' scales
// (absmax / 7) and inverses (7 / absmax) take one vector division each, not sixteen scalar
// ones; the rotated blocks wait in an L1-sized buffer between the two passes. The rotation's
// 1/8 is folded into the absmax and the inverse. Same arithmetic as int4 on the rotated
// block otherwise. False at the first group holding NaN or Inf (or overflowing).
constexpr int64_t kRotationGroup = 4;

__attribute__((target("avx2,fma"))) bool encodeRotatedInt4Avx2(const float* data, int64_t blocks, char* scales,
                                                              uint8_t* packed) {
  constexpr int kHalves = kRotationGroup * kRotationBlock / kInt4Block;
  alignas(32) float rotated[kRotationGroup * kRotationBlock];
  alignas(32) float inverse[kHalves];
  const __m256 eighth = _mm256_set1_ps(0.125f), seven = _mm256_set1_ps(7.f);
  const __m256i finiteLimit = _mm256_set1_epi32(static_cast<int32_t>(kNonFiniteBits - 1));
  static_assert(kHalves == 8, "one vector of scales a group");
  for (int64_t b = 0; b < blocks; b += kRotationGroup) {
    __m256i lanes[kHalves];
#pragma GCC unroll 4
    for (int j = 0; j < kRotationGroup; ++j) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(data + (b + j) * kRotationBlock + 8 * k);
      hadamardRegistersUnscaled(r);
      lanes[2 * j] = absMaxLanesRegisters(r);
      lanes[2 * j + 1] = absMaxLanesRegisters(r + 4);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) _mm256_store_ps(rotated + j * kRotationBlock + 8 * k, r[k]);
    }
    const __m256i absBits = maxHalves(maxOfFour(lanes[0], lanes[1], lanes[2], lanes[3]),
                                      maxOfFour(lanes[4], lanes[5], lanes[6], lanes[7]));
    // Bits of a finite |x| are below kNonFiniteBits as signed integers too.
    if (!_mm256_testz_si256(_mm256_cmpgt_epi32(absBits, finiteLimit), _mm256_set1_epi32(-1))) return false;
    const __m256 absmax = _mm256_mul_ps(_mm256_castsi256_ps(absBits), eighth);
    _mm256_storeu_ps(reinterpret_cast<float*>(scales + 4 * 2 * b), _mm256_div_ps(absmax, seven));
    const __m256 positive = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_castps_si256(absmax), _mm256_setzero_si256()));
    _mm256_store_ps(inverse, _mm256_and_ps(_mm256_mul_ps(_mm256_div_ps(seven, absmax), eighth), positive));
#pragma GCC unroll 8
    for (int h = 0; h < kHalves; ++h) {
      packInt4Registers(reinterpret_cast<const __m256*>(rotated + h * kInt4Block), _mm256_broadcast_ss(inverse + h),
                        packed + (2 * b + h) * kInt4Block / 2);
    }
  }
  return true;
}

// The inverse over whole 64-blocks: restore both halves (the 1/8 folded into the scale),
// rotate, store.
__attribute__((target("avx2,fma"))) void decodeRotatedInt4Avx2(const char* scales, const uint8_t* packed,
                                                              int64_t blocks, float* out) {
  for (int64_t b = 0; b < blocks; ++b) {
    __m256 r[8];
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      const int64_t index = 2 * b + half;
      float scale;
      std::memcpy(&scale, scales + 4 * index, 4);
      restoreInt4Registers(packed + index * kInt4Block / 2, scale * 0.125f, r + 4 * half);
    }
    hadamardRegistersUnscaled(r);
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) _mm256_storeu_ps(out + b * kRotationBlock + 8 * k, r[k]);
  }
}

class RotationCodec : public Codec {
 public:
  explicit RotationCodec(CodecPtr inner)
      : inner_(std::move(inner)), fusedInt4_(inner_->spec() == "int4"), fusedBlocks_(blockFormat(inner_->spec())) {}

  std::string spec() const override { return chainSpec(*inner_, "rot"); }

  EncodedTensor encode(const at::Tensor& input) override {
    const at::Tensor x = floatInput("rot", input);
    const int64_t n = x.numel(), padded = paddedLength(n);
    EncodedTensor out = encodedHeader(spec(), input);
    if (fusedInt4_) {
      out.payload = encodeFusedInt4(x);
      return out;
    }
    if (fusedBlocks_ != nullptr) {
      out.payload = encodeBlocks(*fusedBlocks_, "rot", x, true);
      return out;
    }
    requireFinite("rot", x);
    at::Tensor rotated = torch::empty({padded});
    float* data = rotated.data_ptr<float>();
    std::memcpy(data, x.data_ptr<float>(), sizeof(float) * static_cast<size_t>(n));
    std::fill(data + n, data + padded, 0.f);
    hadamard(data, padded / kRotationBlock);
    out.payload = encodePart(*inner_, rotated);
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    const int64_t n = elementCount(encoded.shape), padded = paddedLength(n);
    at::Tensor restored;
    if (fusedInt4_) {
      restored = decodeFusedInt4(encoded.payload, n);
    } else if (fusedBlocks_ != nullptr) {
      restored = decodeBlocks(*fusedBlocks_, "rot", encoded, true);
    } else {
      restored = decodePart(*inner_, encoded.payload, {padded}).to(torch::kFloat).contiguous();
      hadamard(restored.data_ptr<float>(), padded / kRotationBlock);
      restored = restored.narrow(0, 0, n);
    }
    return restored.view(encoded.shape).to(toScalarType(encoded.dtype));
  }

  CodecState state() const override { return prefixedState("inner.", inner_->state()); }
  void loadState(const CodecState& state) override {
    for (const auto& entry : state) {
      if (entry.first.rfind("inner.", 0) != 0) throw WireError("rot: unexpected state \"" + entry.first + "\"");
    }
    inner_->loadState(stateUnder("inner.", state));
  }

 private:
  // "int4+rot" a block at a time: rotate 64 floats in registers and quantise them straight
  // into the payload, one pass, no rotated copy. The bytes are exactly the unfused path's
  // (int4 of the rotated, zero-padded vector; a subnormal rotated value may round
  // differently). With AVX2 and FMA whole blocks go four at a time through registers; the
  // rest (and every block without them) through memory.
  std::string encodeFusedInt4(const at::Tensor& x) const {
    const int64_t n = x.numel(), padded = paddedLength(n);
    std::string payload(int4Size(padded), '\0');
    char* scales = payload.data();
    auto* packed = reinterpret_cast<uint8_t*>(payload.data() + int4Blocks(padded) * 4);
    const float* data = x.data_ptr<float>();
    int64_t done = 0;
    if (haveAvx2Fma()) {
      done = n / kRotationBlock / kRotationGroup * kRotationGroup;
      if (!encodeRotatedInt4Avx2(data, done, scales, packed)) throwNonFiniteOrOverflow("rot", x);
    }
    float block[kRotationBlock];
    for (int64_t b = done; b < padded / kRotationBlock; ++b) {
      const int64_t begin = b * kRotationBlock, count = std::min(kRotationBlock, n - begin);
      std::memcpy(block, data + begin, sizeof(float) * static_cast<size_t>(count));
      std::fill(block + count, block + kRotationBlock, 0.f);
      hadamard(block, 1);
      for (int64_t half = 0; half < kRotationBlock / kInt4Block; ++half) {
        const int64_t index = b * (kRotationBlock / kInt4Block) + half;
        const uint32_t bits = encodeInt4Block(block + half * kInt4Block, packed + index * kInt4Block / 2);
        if (bits >= kNonFiniteBits) throwNonFiniteOrOverflow("rot", x);
        const float scale = bitsToFloat(bits) / 7.f;
        std::memcpy(scales + 4 * index, &scale, 4);
      }
    }
    return payload;
  }

  at::Tensor decodeFusedInt4(const std::string& payload, int64_t n) const {
    const int64_t padded = paddedLength(n);
    if (payload.size() != int4Size(padded)) {
      throw WireError("rot: int4 payload of " + std::to_string(payload.size()) + " bytes, expected " +
                      std::to_string(int4Size(padded)));
    }
    const char* scales = payload.data();
    const auto* packed = reinterpret_cast<const uint8_t*>(payload.data() + int4Blocks(padded) * 4);
    at::Tensor out = torch::empty({n}, torch::kFloat);
    float* data = out.data_ptr<float>();
    int64_t done = 0;
    if (haveAvx2Fma()) {
      done = n / kRotationBlock;
      decodeRotatedInt4Avx2(scales, packed, done, data);
    }
    float block[kRotationBlock];
    for (int64_t b = done; b < padded / kRotationBlock; ++b) {
      for (int64_t half = 0; half < kRotationBlock / kInt4Block; ++half) {
        const int64_t index = b * (kRotationBlock / kInt4Block) + half;
        float scale;
        std::memcpy(&scale, scales + 4 * index, 4);
        decodeInt4Block(packed + index * kInt4Block / 2, scale, block + half * kInt4Block);
      }
      hadamard(block, 1);
      const int64_t begin = b * kRotationBlock;
      std::memcpy(data + begin, block, sizeof(float) * static_cast<size_t>(std::min(kRotationBlock, n - begin)));
    }
    return out;
  }

  CodecPtr inner_;
  bool fusedInt4_;
  const BlockFormat* fusedBlocks_;  // "int3+rot", "q13+rot": their kernels rotate (compression/codecs/block_codec.h)
};

}  // namespace

CodecPtr makeRotationCodec(const std::string& argument, CodecPtr inner) {
  if (!argument.empty()) throw Error("codec \"rot\" takes no argument, got \"" + argument + "\"");
  return std::make_unique<RotationCodec>(inner ? std::move(inner) : makeNoneCodec("", nullptr));
}

}  // namespace skytrain::compression
