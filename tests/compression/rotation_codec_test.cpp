// The rotation codec (compression/codecs/rotation_codec.cpp): "rot" in front of any codec, the
// fused int4+rot, int3+rot and q13+rot against their codec on the rotated vector, and the
// formats of int3 and q13.
// Their Codec contract is codec_contract_test's.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstring>

#include "compression/codec_registry.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

using namespace skytrain::compression;

TEST_CASE("rot in front of any codec: exact through none, close through int8, an outlier spread") {
  torch::manual_seed(3);
  const at::Tensor x = torch::randn({5, 77});  // 385 elements: the last 64-block is padded
  auto plain = builtinCodecs().make("rot");
  const at::Tensor back = plain->decode(plain->encode(x));
  CHECK(back.sizes() == x.sizes());
  CHECK((back - x).abs().max().item<double>() < 1e-5);  // the rotation is its own inverse
  auto int8 = builtinCodecs().make("int8+rot");  // the unfused path (int4 alone is fused)
  const at::Tensor close = int8->decode(int8->encode(x));
  CHECK(((close - x).norm() / x.norm()).item<double>() < 0.02);
  // Outlier channels (activations' usual shape): one element in 64 twenty times larger sets
  // int4's scale for its whole block; rotated, the blocks share it out (about 2.5x less
  // error in a simulation; a single isolated spike is the case rotation makes worse).
  const at::Tensor outliers = (torch::randn({256, 256}) *
                               torch::where(torch::arange(256) % 64 == 5, torch::full({256}, 20.0), torch::ones({256})))
                                  .contiguous();
  auto int4 = builtinCodecs().make("int4");
  auto rotated = builtinCodecs().make("int4+rot");
  const double direct = ((int4->decode(int4->encode(outliers)) - outliers).norm() / outliers.norm()).item<double>();
  const double viaRotation =
      ((rotated->decode(rotated->encode(outliers)) - outliers).norm() / outliers.norm()).item<double>();
  CHECK(viaRotation < 0.6 * direct);
  CHECK_THROWS_WITH(builtinCodecs().make("rot:3"), Catch::Contains("no argument"));
}

TEST_CASE("fused int4+rot, int3+rot and q13+rot: the codec's bytes of the rotated vector, the unfused decode") {
  // 1280: whole 64-blocks only (int4: whole groups of four, the vector path); 1489: whole
  // blocks and a partial one (the memory path after the vector one); 31: one partial block.
  for (const std::string codec : {"int4", "int3", "q13"}) {
    for (const int64_t n : {int64_t{1280}, int64_t{1489}, int64_t{31}}) {
      torch::manual_seed(n);
      const at::Tensor x = torch::randn({n}) * torch::exp(torch::randn({n}));  // uneven scales
      const EncodedTensor fused = builtinCodecs().make(codec + "+rot")->encode(x);
      const int64_t padded = (n + 63) / 64 * 64;
      const at::Tensor rotated =
          tensorFromBytes(builtinCodecs().make("rot")->encode(x).payload, WireDType::Float32, {padded});
      auto inner = builtinCodecs().make(codec);
      const EncodedTensor reference = inner->encode(rotated);
      INFO(codec << ", n = " << n);
      CHECK(fused.payload == reference.payload);
      const at::Tensor unrotated = builtinCodecs().make("rot")->decode(
          EncodedTensor{"rot", WireDType::Float32, {padded}, tensorBytes(inner->decode(reference))});
      CHECK(torch::equal(builtinCodecs().make(codec + "+rot")->decode(fused), unrotated.narrow(0, 0, n)));
      EncodedTensor truncated = fused;  // a crafted size is refused before anything is decoded
      truncated.payload.pop_back();
      CHECK_THROWS_AS(builtinCodecs().make(codec + "+rot")->decode(truncated), skytrain::WireError);
    }
  }
}

TEST_CASE("int3 bytes are the stated format: scales, then three bit planes a block") {
  const int64_t n = 1489;  // 23 whole 64-blocks (the vector path) and a partial one
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({n}) * torch::exp(torch::randn({n}));
  const std::string payload = builtinCodecs().make("int3")->encode(x).payload;
  const int64_t blocks = (n + 63) / 64;
  REQUIRE(payload.size() == static_cast<size_t>(blocks * 28));
  const at::Tensor padded = torch::cat({x, torch::zeros({blocks * 64 - n})}).view({blocks, 64});
  const at::Tensor absmax = padded.abs().amax(1, true);
  const at::Tensor levels = (padded * (3.0 / absmax).to(torch::kFloat)).round().to(torch::kLong) + 3;
  for (int64_t b = 0; b < blocks; ++b) {
    float scale;
    std::memcpy(&scale, payload.data() + 4 * b, 4);
    CHECK(scale == absmax[b][0].item<float>() / 3.f);
    for (int p = 0; p < 3; ++p) {
      uint64_t plane;
      std::memcpy(&plane, payload.data() + 4 * blocks + 24 * b + 8 * p, 8);
      uint64_t expected = 0;
      for (int i = 0; i < 64; ++i) expected |= static_cast<uint64_t>((levels[b][i].item<int64_t>() >> p) & 1) << i;
      INFO("block " << b << " plane " << p);
      CHECK(plane == expected);
    }
  }
}

namespace {

// A block's q13 scale as the format states it: absmax/6 rounded up to bfloat16.
uint16_t q13Scale(float absmax) {
  const float s = absmax / 6.f;
  uint32_t bits;
  std::memcpy(&bits, &s, 4);
  return static_cast<uint16_t>(((bits & 0xffffu) != 0 ? bits + 0x10000u : bits) >> 16);
}

}  // namespace

TEST_CASE("q13 bytes are the stated format: four base-13 levels and a scale bit a word") {
  const int64_t n = 1489;  // 23 whole 64-blocks (the vector path) and a partial one
  torch::manual_seed(6);
  at::Tensor x = torch::randn({n}) * torch::exp(3 * torch::randn({n}));
  x.narrow(0, 64, 64).zero_();               // an all-zero block: scale 0
  x.narrow(0, 128, 64).copy_(torch::randn({64}) * 1e-39f);  // a subnormal block: decodes to zero
  x[200] = 3.0e38f;                          // near float32's largest: no overflow
  auto codec = builtinCodecs().make("q13");
  const EncodedTensor encoded = codec->encode(x);
  const int64_t blocks = (n + 63) / 64;
  REQUIRE(encoded.payload.size() == static_cast<size_t>(blocks * 32));
  const at::Tensor padded = torch::cat({x, torch::zeros({blocks * 64 - n})}).view({blocks, 64});
  for (int64_t b = 0; b < blocks; ++b) {
    const uint16_t scale = q13Scale(padded[b].abs().max().item<float>());
    uint32_t scaleBits = static_cast<uint32_t>(scale) << 16;
    float s;
    std::memcpy(&s, &scaleBits, 4);
    const float inverse = s >= 1.17549435e-38f ? 1.f / s : 0.f;
    const at::Tensor levels = (padded[b] * inverse).round().to(torch::kLong) + 6;
    CHECK(levels.min().item<int64_t>() >= 0);
    CHECK(levels.max().item<int64_t>() <= 12);
    for (int j = 0; j < 16; ++j) {
      uint16_t word;
      std::memcpy(&word, encoded.payload.data() + 32 * b + 2 * j, 2);
      const int64_t digits = levels[j].item<int64_t>() + 13 * levels[j + 16].item<int64_t>() +
                             169 * levels[j + 32].item<int64_t>() + 2197 * levels[j + 48].item<int64_t>();
      INFO("block " << b << " word " << j);
      CHECK(word == static_cast<uint16_t>(digits | (((scale >> j) & 1) << 15)));
    }
  }
  const at::Tensor back = codec->decode(encoded);
  CHECK(back.narrow(0, 64, 128).abs().max().item<float>() == 0.f);
  CHECK(std::abs(back[200].item<float>() - 3.0e38f) <= 3.0e38f / 12 * 1.01f);
}

TEST_CASE("q13 decodes any word the same on the vector and portable paths") {
  // Every 15-bit value (crafted ones above 28560 included) through one position of a
  // whole block (the vector path, dividing by 13 with a multiply) and of a partial block
  // (the portable path, with / and %). Levels are the word's base-13 digits less 6; the
  // top one may reach 14 in a crafted word.
  auto codec = builtinCodecs().make("q13");
  const uint16_t one = 0x3f80;  // bfloat16 1.0: bit j of it rides on word j
  std::string payload(2 * 32, '\0');  // a whole block and a partial one
  int mismatches = 0;
  for (uint32_t v = 0; v < 32768; ++v) {
    for (int half = 0; half < 2; ++half) {
      for (int j = 0; j < 16; ++j) {
        const uint16_t w = static_cast<uint16_t>((j == 3 ? v : 6 * 2380) | (((one >> j) & 1) << 15));
        std::memcpy(&payload[32 * half + 2 * j], &w, 2);
      }
    }
    const at::Tensor decoded = codec->decode(EncodedTensor{"q13", WireDType::Float32, {64 + 33}, payload});
    const float* out = decoded.data_ptr<float>();
    uint32_t rest = v;
    for (int k = 0; k < 4; ++k) {
      const float expected = static_cast<float>(static_cast<int32_t>(k < 3 ? rest % 13 : rest) - 6);
      rest /= 13;
      if (out[3 + 16 * k] != expected || (k < 2 && out[64 + 3 + 16 * k] != expected)) {
        ++mismatches;
      }
    }
  }
  CHECK(mismatches == 0);
}
