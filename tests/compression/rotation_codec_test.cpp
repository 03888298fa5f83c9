// The rotation codec (compression/rotation_codec.cpp): "rot" in front of any codec, the
// fused int4+rot and int3+rot against their codec on the rotated vector, and int3's format.
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

TEST_CASE("fused int4+rot and int3+rot: the codec's bytes of the rotated vector, the unfused decode") {
  // 1280: whole 64-blocks only (int4: whole groups of four, the vector path); 1489: whole
  // blocks and a partial one (the memory path after the vector one); 31: one partial block.
  for (const std::string codec : {"int4", "int3"}) {
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
