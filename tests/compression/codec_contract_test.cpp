// The contract every registered codec keeps (compression/codec.h), run over the registry.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "compression/codec_registry.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

using namespace skytrain::compression;

namespace {

// Max abs error each codec promises on `input` (the bound stated next to its implementation).
double errorBound(const std::string& name, const at::Tensor& input) {
  if (name == "none") return 0.0;  // bit-exact
  FAIL("codec " << name << " has no error bound in the contract test");
  return 0.0;
}

}  // namespace

TEST_CASE("every registered codec keeps the Codec contract") {
  const std::string name = GENERATE(from_range(builtinCodecs().names()));
  CAPTURE(name);
  auto codec = builtinCodecs().make(name);
  torch::manual_seed(5);

  SECTION("shape and dtype survive; the error is within the bound") {
    const at::Tensor input = torch::randn({64, 48});
    const EncodedTensor encoded = codec->encode(input);
    CHECK(encoded.codec == codec->spec());
    const at::Tensor output = codec->decode(encoded);
    CHECK(output.sizes() == input.sizes());
    CHECK(output.scalar_type() == input.scalar_type());
    CHECK((output - input).abs().max().item<double>() <= errorBound(name, input));
  }
  SECTION("non-contiguous input") {
    const at::Tensor input = torch::randn({48, 64}).t();
    REQUIRE_FALSE(input.is_contiguous());
    const at::Tensor output = codec->decode(codec->encode(input));
    CHECK(output.sizes() == input.sizes());
    CHECK((output - input).abs().max().item<double>() <= errorBound(name, input));
  }
  SECTION("empty input") {
    const at::Tensor input = torch::randn({0, 16});
    const at::Tensor output = codec->decode(codec->encode(input));
    CHECK(output.sizes() == input.sizes());
  }
  SECTION("all-zero rows stay zero") {
    const at::Tensor input = torch::zeros({8, 16});
    CHECK(codec->decode(codec->encode(input)).abs().max().item<double>() == 0.0);
  }
  SECTION("truncated and extended payloads are refused") {
    EncodedTensor encoded = codec->encode(torch::randn({8, 16}));
    EncodedTensor truncated = encoded;
    truncated.payload.pop_back();
    CHECK_THROWS_AS(codec->decode(truncated), skytrain::WireError);
    EncodedTensor extended = encoded;
    extended.payload.push_back('x');
    CHECK_THROWS_AS(codec->decode(extended), skytrain::WireError);
    EncodedTensor badShape = encoded;
    badShape.shape = {-8, 16};
    CHECK_THROWS_AS(codec->decode(badShape), skytrain::WireError);
  }
}

TEST_CASE("none: NaN and Inf pass through unchanged, and the size is numel * element size") {
  auto codec = builtinCodecs().make("none");
  const at::Tensor input = torch::tensor({1.0f, std::nanf(""), INFINITY, -INFINITY});
  const EncodedTensor encoded = codec->encode(input);
  CHECK(encoded.payload.size() == 4 * sizeof(float));
  const at::Tensor output = codec->decode(encoded);
  CHECK(std::isnan(output[1].item<float>()));
  CHECK(output[2].item<float>() == INFINITY);
  CHECK(output[3].item<float>() == -INFINITY);
  const at::Tensor ids = torch::arange(10, torch::kLong).view({2, 5});
  CHECK(torch::equal(codec->decode(codec->encode(ids)), ids));
}

TEST_CASE("unknown codecs are refused with the valid names") {
  CHECK_THROWS_WITH(builtinCodecs().make("zstd"), Catch::Contains("unknown codec") && Catch::Contains("valid: none"));
  CHECK_THROWS_AS(builtinCodecs().make("none:3"), skytrain::Error);
}

TEST_CASE("tensorFromBytes checks the size before it copies") {
  CHECK_THROWS_AS(tensorFromBytes(std::string(7, '\0'), WireDType::Float32, {2}), skytrain::WireError);
  CHECK_THROWS_AS(tensorFromBytes("", WireDType::Float32, {INT64_MAX / 2, 4}), skytrain::WireError);
  CHECK(tensorFromBytes(std::string(8, '\0'), WireDType::Float32, {2}).numel() == 2);
}
