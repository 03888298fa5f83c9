// The contract every registered codec keeps (compression/codec.h), run over the registry:
// each codec's stated error bound and size formula are written once in kCases below.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <functional>
#include <map>

#include <zstd.h>

#include "compression/codec_registry.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

using namespace skytrain::compression;

namespace {

using Shape = std::vector<int64_t>;

struct CodecCase {
  std::string spec;  // a representative spec of the codec
  // Per-element bound on |decode(encode(x)) - x|, as a tensor the shape of x.
  std::function<at::Tensor(const at::Tensor& x)> bound;
  // Payload bytes for a float32 input of this shape.
  std::function<size_t(const Shape&)> size;
  bool passesNonFinite;  // NaN/Inf travel through; otherwise they are refused
  bool sizeIsBound = false;  // `size` is an upper bound (a general-purpose compressor's)
};

int64_t numel(const Shape& s) { return elementCount(s); }
int64_t cols(const Shape& s) { return s.empty() ? 1 : s.back(); }
int64_t rows(const Shape& s) { return cols(s) == 0 ? 0 : numel(s) / cols(s); }

at::Tensor rowAbsMax(const at::Tensor& x) {
  if (x.numel() == 0) return torch::zeros_like(x);
  const auto m = x.reshape({-1, x.size(-1)}).abs().amax(1, true);
  return m.expand({m.size(0), x.size(-1)}).reshape(x.sizes());
}

at::Tensor blockAbsMax(const at::Tensor& x, int64_t block) {
  const int64_t n = x.numel(), padded = (n + block - 1) / block * block;
  auto flat = torch::zeros({padded});
  flat.narrow(0, 0, n).copy_(x.reshape({-1}));
  auto m = flat.view({-1, block}).abs().amax(1, true).expand({padded / block, block}).reshape({-1});
  return m.narrow(0, 0, n).reshape(x.sizes());
}

// Each element's block's L2 norm (blocks of `block` over the flattened tensor, zero-padded).
at::Tensor blockNorm(const at::Tensor& x, int64_t block) {
  const int64_t n = x.numel(), padded = (n + block - 1) / block * block;
  auto flat = torch::zeros({padded});
  flat.narrow(0, 0, n).copy_(x.reshape({-1}));
  auto m = flat.view({-1, block}).norm(2, 1, true).expand({padded / block, block}).reshape({-1});
  return m.narrow(0, 0, n).reshape(x.sizes());
}

int64_t topkKeep(int64_t n, double f) { return n == 0 ? 0 : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(f * n - 1e-9))); }

const std::map<std::string, CodecCase>& cases() {
  static const std::map<std::string, CodecCase> table = {
      {"none", {"none", [](const at::Tensor& x) { return torch::zeros_like(x); },
                [](const Shape& s) { return static_cast<size_t>(numel(s) * 4); }, true}},
      {"fp16", {"fp16", [](const at::Tensor& x) { return x.abs() * std::ldexp(1.0, -11) + std::ldexp(1.0, -25); },
                [](const Shape& s) { return static_cast<size_t>(numel(s) * 2); }, true}},
      {"bf16", {"bf16", [](const at::Tensor& x) { return x.abs() * std::ldexp(1.0, -8) + 1e-38; },
                [](const Shape& s) { return static_cast<size_t>(numel(s) * 2); }, true}},
      {"int8", {"int8", [](const at::Tensor& x) { return rowAbsMax(x) / 254 * (1 + 1e-5) + 1e-12; },
                [](const Shape& s) { return static_cast<size_t>(rows(s) * 4 + numel(s)); }, false}},
      {"int4", {"int4", [](const at::Tensor& x) { return blockAbsMax(x, 32) / 14 * (1 + 1e-5) + 1e-12; },
                [](const Shape& s) { return static_cast<size_t>((numel(s) + 31) / 32 * 4 + (numel(s) + 1) / 2); }, false}},
      {"int3", {"int3", [](const at::Tensor& x) { return blockAbsMax(x, 64) / 6 * (1 + 1e-5) + 1e-12; },
                [](const Shape& s) { return static_cast<size_t>((numel(s) + 63) / 64 * 28); }, false}},
      // A bfloat16 scale rounded up: absmax/12 to 2^-7; blocks below 7e-38 decode to zero.
      {"q13", {"q13", [](const at::Tensor& x) { return blockAbsMax(x, 64) / 12 * (1 + std::ldexp(1.0, -7)) * (1 + 1e-5) + 1e-12; },
               [](const Shape& s) { return static_cast<size_t>((numel(s) + 63) / 64 * 32); }, false}},
      // Full rank: the input comes back to float32 rounding.
      {"svd", {"svd:1.0", [](const at::Tensor& x) {
                 return x.numel() == 0 ? x.clone() : torch::full_like(x, 1e-4 * x.abs().max().item<double>() + 1e-12);
               },
               [](const Shape& s) {
                 const int64_t r = std::min(rows(s), cols(s));
                 return static_cast<size_t>(20 + 4 * rows(s) * r + 4 * r * cols(s));
               }, false}},
      // A dropped element is no larger than the smallest kept one.
      {"topk", {"topk:0.1", [](const at::Tensor& x) {
                  const int64_t k = topkKeep(x.numel(), 0.1);
                  const double kth = k == 0 ? 0.0 : std::get<0>(x.abs().reshape({-1}).topk(k)).min().item<double>();
                  return torch::full_like(x, kth);
                },
                [](const Shape& s) { return static_cast<size_t>(20 + 8 * topkKeep(numel(s), 0.1)); }, false}},
      // Lossless; its size depends on the data: at most zstd's bound on the raw bytes.
      {"zstd", {"zstd", [](const at::Tensor& x) { return torch::zeros_like(x); },
                [](const Shape& s) { return static_cast<size_t>(ZSTD_COMPRESSBOUND(numel(s) * 4)); }, true, true}},
      // Orthonormal rotation in front of int4: a 64-block's error is int4's on the rotated
      // block, at most 8/14 of the block's L2 norm (compression/codecs/rotation_codec.cpp).
      {"rot", {"int4+rot", [](const at::Tensor& x) { return blockNorm(x, 64) * 8 / 14 * (1 + 1e-4) + 1e-6; },
               [](const Shape& s) {
                 const int64_t padded = (numel(s) + 63) / 64 * 64;
                 return static_cast<size_t>(padded / 32 * 4 + padded / 2);
               }, false}},
      // The first message of a stream has no residual: the inner codec's bound and size.
      {"ef", {"ef(int8)", [](const at::Tensor& x) { return rowAbsMax(x) / 254 * (1 + 1e-5) + 1e-12; },
              [](const Shape& s) { return static_cast<size_t>(rows(s) * 4 + numel(s)); }, false}},
  };
  return table;
}

const CodecCase& caseFor(const std::string& name) {
  auto it = cases().find(name);
  if (it == cases().end()) FAIL("codec \"" << name << "\" is registered but has no contract case");
  return it->second;
}

void checkRoundTrip(Codec& codec, const CodecCase& c, const at::Tensor& input) {
  const EncodedTensor encoded = codec.encode(input);
  CHECK(encoded.codec == codec.spec());
  if (c.sizeIsBound) {
    CHECK(encoded.payload.size() <= c.size(input.sizes().vec()));
  } else {
    CHECK(encoded.payload.size() == c.size(input.sizes().vec()));
  }
  const at::Tensor output = codec.decode(encoded);
  CHECK(output.sizes() == input.sizes());
  CHECK(output.scalar_type() == input.scalar_type());
  const at::Tensor excess = (output - input).abs() - c.bound(input);
  CHECK((excess.numel() == 0 || excess.max().item<double>() <= 0.0));
}

}  // namespace

// Codecs of integer tensors (token links) have their own contract below; "pred", which needs
// token IDs beside [B, T, d] tensors, has its own in predictive_codec_test.cpp.
std::vector<std::string> floatCodecs() {
  std::vector<std::string> out;
  for (const auto& name : builtinCodecs().names()) {
    if (name != "tokens" && name != "pred") out.push_back(name);
  }
  return out;
}

TEST_CASE("every registered codec keeps the Codec contract") {
  const std::string name = GENERATE(from_range(floatCodecs()));
  const CodecCase& c = caseFor(name);
  CAPTURE(c.spec);
  auto codec = builtinCodecs().make(c.spec);
  CHECK(builtinCodecs().make(codec->spec())->spec() == codec->spec());  // canonical specs parse again
  torch::manual_seed(5);

  SECTION("shape, dtype, size and error bound on activations") {
    checkRoundTrip(*codec, c, torch::randn({64, 48}));
    checkRoundTrip(*codec, c, torch::randn({2, 16, 24}) * 30);
  }
  SECTION("non-contiguous input") {
    const at::Tensor input = torch::randn({48, 64}).t();
    REQUIRE_FALSE(input.is_contiguous());
    checkRoundTrip(*codec, c, input);
  }
  SECTION("empty input") {
    checkRoundTrip(*codec, c, torch::randn({0, 16}));
    checkRoundTrip(*codec, c, torch::randn({16, 0}));
  }
  SECTION("all-zero rows stay zero") {
    at::Tensor input = torch::randn({8, 16});
    input[3].zero_();
    input[5].zero_();
    const at::Tensor output = codec->decode(codec->encode(input));
    if (name != "svd" && name != "topk" && name != "rot") {  // factoring, selection and rotation mix rows
      CHECK(output[3].abs().max().item<double>() == 0.0);
      CHECK(output[5].abs().max().item<double>() == 0.0);
    }
    auto fresh = builtinCodecs().make(c.spec);  // ef() would carry the residual of the message above
    CHECK(fresh->decode(fresh->encode(torch::zeros({8, 16}))).abs().max().item<double>() == 0.0);
  }
  SECTION("NaN and Inf: passed through or refused by name") {
    const at::Tensor input = torch::tensor({{1.f, std::nanf(""), INFINITY, -2.f}});
    if (c.passesNonFinite) {
      const at::Tensor output = codec->decode(codec->encode(input));
      CHECK(std::isnan(output[0][1].item<float>()));
      CHECK(output[0][2].item<float>() == INFINITY);
    } else {
      CHECK_THROWS_WITH(codec->encode(input), Catch::Contains("NaN/Inf"));
    }
  }
  SECTION("truncated, extended and mis-shaped payloads are refused") {
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
    EncodedTensor otherShape = encoded;
    otherShape.shape = {9, 16};
    CHECK_THROWS_AS(codec->decode(otherShape), skytrain::WireError);
  }
  SECTION("random corruption never crashes") {
    const EncodedTensor encoded = codec->encode(torch::randn({8, 16}));
    for (size_t i = 0; i < encoded.payload.size(); i += 7) {
      EncodedTensor corrupted = encoded;
      corrupted.payload[i] = static_cast<char>(corrupted.payload[i] ^ 0xa5);
      at::Tensor decoded;
      try {
        decoded = codec->decode(corrupted);
      } catch (const skytrain::WireError&) {
        continue;  // refused: fine
      }
      CHECK(decoded.sizes() == torch::IntArrayRef({8, 16}));
    }
  }
}

TEST_CASE("int8 and int4 refuse integer tensors by name") {
  CHECK_THROWS_WITH(builtinCodecs().make("int8")->encode(torch::arange(4)), Catch::Contains("floating-point"));
  CHECK_THROWS_WITH(builtinCodecs().make("fp16")->encode(torch::arange(4)), Catch::Contains("floating-point"));
}

TEST_CASE("topk keeps exactly the k largest magnitudes") {
  const int64_t n = GENERATE(100, 1000, 300000);
  const double fraction = GENERATE(0.001, 0.05, 0.5);
  CAPTURE(n, fraction);
  torch::manual_seed(n);
  const at::Tensor x = torch::randn({n});
  auto codec = builtinCodecs().make("topk:" + std::to_string(fraction));
  const at::Tensor y = codec->decode(codec->encode(x));
  const int64_t k = topkKeep(n, fraction);
  const at::Tensor kept = y != 0;
  CHECK(kept.sum().item<int64_t>() == k);
  CHECK(torch::equal(y.masked_select(kept), x.masked_select(kept)));
  const double smallestKept = x.abs().masked_select(kept).min().item<double>();
  const double largestDropped = x.abs().masked_select(kept.logical_not()).max().item<double>();
  CHECK(smallestKept >= largestDropped);
}

TEST_CASE("topk refuses out-of-range indices") {
  auto codec = builtinCodecs().make("topk:0.5");
  EncodedTensor e = codec->encode(torch::randn({4}));
  e.payload[e.payload.size() - 1] = 0x7f;  // last index -> huge
  CHECK_THROWS_WITH(codec->decode(e), Catch::Contains("outside"));
}

TEST_CASE("svd below full rank is close to the optimal low-rank error") {
  torch::manual_seed(3);
  // An activation-like matrix: a decaying spectrum plus noise.
  const at::Tensor a = torch::mm(torch::randn({512, 64}) * torch::exp(-torch::arange(64) / 8.0), torch::randn({64, 96})) +
                       0.01 * torch::randn({512, 96});
  const auto s = std::get<1>(torch::linalg_svd(a, false));
  for (int r : {4, 8, 16}) {
    CAPTURE(r);
    auto codec = builtinCodecs().make("svd:rank=" + std::to_string(r));
    const EncodedTensor e = codec->encode(a);
    CHECK(e.payload.size() == static_cast<size_t>(20 + 4 * 512 * r + 4 * r * 96));
    const double error = (codec->decode(e) - a).norm().item<double>();
    const double optimal = s.narrow(0, r, s.size(0) - r).pow(2).sum().sqrt().item<double>();
    CHECK(error <= 1.05 * optimal + 1e-6);
  }
  // ratio form: SVD(0.5) of min(512, 96) keeps 48
  CHECK(builtinCodecs().make("svd:0.5")->encode(a).payload.size() == static_cast<size_t>(20 + 4 * 512 * 48 + 4 * 48 * 96));
}

TEST_CASE("chains encode the structural codec's parts with the codec left of '+'") {
  torch::manual_seed(4);
  const at::Tensor a = torch::randn({256, 64});
  auto chain = builtinCodecs().make("fp16+svd:0.5");
  CHECK(chain->spec() == "fp16+svd:0.5");
  const EncodedTensor e = chain->encode(a);
  CHECK(e.payload.size() == static_cast<size_t>(20 + 2 * 256 * 32 + 2 * 32 * 64));
  CHECK(chain->decode(e).sizes() == a.sizes());
  auto quantTopk = builtinCodecs().make("int8+topk:0.25");
  CHECK(quantTopk->encode(a).payload.size() == static_cast<size_t>(20 + (4 + 4096) + 4 * 4096));
  CHECK(builtinCodecs().make("ef(fp16+svd:rank=8)")->spec() == "ef(fp16+svd:rank=8)");
}

TEST_CASE("error feedback carries the residual into the next message") {
  torch::manual_seed(6);
  const at::Tensor x = torch::randn({32, 64});
  auto plain = builtinCodecs().make("topk:0.1");
  auto ef = builtinCodecs().make("ef(topk:0.1)");
  at::Tensor sentPlain = torch::zeros_like(x), sentEf = torch::zeros_like(x);
  constexpr int kMessages = 100;
  for (int i = 0; i < kMessages; ++i) {
    sentPlain += plain->decode(plain->encode(x));
    sentEf += ef->decode(ef->encode(x));
  }
  // Without feedback the dropped part is lost every time, so the error grows with the
  // number of messages; with it, the error is the last residual, which stays bounded.
  const double plainError = (sentPlain - kMessages * x).norm().item<double>();
  const double efError = (sentEf - kMessages * x).norm().item<double>();
  CHECK(efError < 0.1 * plainError);
}

TEST_CASE("bad codec specs are refused with the reason") {
  const auto& r = builtinCodecs();
  CHECK_THROWS_WITH(r.make("lz4"), Catch::Contains("unknown codec") && Catch::Contains("valid: bf16, ef, fp16"));
  CHECK_THROWS_WITH(r.make("zstd:9"), Catch::Contains("no argument"));
  CHECK_THROWS_WITH(r.make("zstd+int8"), Catch::Contains("int8"));
  CHECK_THROWS_WITH(r.make("svd:0.5+fp16"), Catch::Contains("cannot follow '+'"));
  CHECK_THROWS_WITH(r.make("topk"), Catch::Contains("needs a fraction"));
  CHECK_THROWS_WITH(r.make("topk:1.5"), Catch::Contains("1.5"));
  CHECK_THROWS_WITH(r.make("svd:rank=0"), Catch::Contains("rank="));
  CHECK_THROWS_WITH(r.make("svd:abc"), Catch::Contains("abc"));
  CHECK_THROWS_WITH(r.make("ef(int8"), Catch::Contains("unmatched"));
  CHECK_THROWS_WITH(r.make("int8+"), Catch::Contains("empty"));
  CHECK_THROWS_WITH(r.make("none:3"), Catch::Contains("no argument"));
  CHECK_THROWS_WITH(r.make("int3:2"), Catch::Contains("no argument"));
  CHECK_THROWS_WITH(r.make("q13:4"), Catch::Contains("no argument"));
  CHECK_THROWS_AS(r.make(""), skytrain::Error);
}

TEST_CASE("tensorFromBytes checks the size before it copies") {
  CHECK_THROWS_AS(tensorFromBytes(std::string(7, '\0'), WireDType::Float32, {2}), skytrain::WireError);
  CHECK_THROWS_AS(tensorFromBytes("", WireDType::Float32, {INT64_MAX / 2, 4}), skytrain::WireError);
  CHECK(tensorFromBytes(std::string(8, '\0'), WireDType::Float32, {2}).numel() == 2);
}

TEST_CASE("tokens: IDs in the smallest width and bit-packed labels, exactly") {
  auto codec = builtinCodecs().make("tokens");
  torch::manual_seed(3);
  for (const int64_t vocab : {200, 8000, 70000}) {
    CAPTURE(vocab);
    const at::Tensor ids = torch::randint(0, vocab, {4, 16, 1}, torch::kLong);
    const at::Tensor labels = torch::randint(0, 2, {4, 16, 1}, torch::kLong);
    const at::Tensor input = torch::cat({ids, labels}, 2);
    const EncodedTensor encoded = codec->encode(input);
    const size_t width = vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4;
    CHECK(encoded.payload.size() == 1 + 64 * width + 8);  // 64 labels in 8 bytes
    const at::Tensor output = codec->decode(encoded);
    CHECK(output.scalar_type() == torch::kLong);
    CHECK(torch::equal(output, input));
    // Every truncation and extension is refused; corruption never reads out of bounds.
    for (size_t cut = 0; cut < encoded.payload.size(); cut += 5) {
      EncodedTensor bad = encoded;
      bad.payload.resize(cut);
      CHECK_THROWS_AS(codec->decode(bad), skytrain::WireError);
    }
    EncodedTensor longer = encoded;
    longer.payload += "x";
    CHECK_THROWS_AS(codec->decode(longer), skytrain::WireError);
    EncodedTensor wide = encoded;
    wide.payload[0] = 3;
    CHECK_THROWS_AS(codec->decode(wide), skytrain::WireError);
  }
  SECTION("IDs alone, int32 in and out, and through zstd") {
    const at::Tensor ids = torch::randint(0, 256, {3, 5, 1}, torch::kInt);
    CHECK(torch::equal(codec->decode(codec->encode(ids)), ids));
    auto packed = builtinCodecs().make("tokens+zstd");
    CHECK(packed->spec() == "tokens+zstd");
    const at::Tensor repetitive = torch::zeros({64, 32, 2}, torch::kLong);
    const EncodedTensor small = packed->encode(repetitive);
    CHECK(small.payload.size() < 64);
    CHECK(torch::equal(packed->decode(small), repetitive));
  }
  SECTION("refused: floats, negative IDs, labels other than 0 and 1") {
    CHECK_THROWS_WITH(codec->encode(torch::randn({2, 2})), Catch::Contains("integer tensor"));
    CHECK_THROWS_WITH(codec->encode(torch::full({2, 1}, -1, torch::kLong)), Catch::Contains("[0, 2^32)"));
    CHECK_THROWS_WITH(codec->encode(torch::full({2, 2}, 2, torch::kLong)), Catch::Contains("0 or 1"));
  }
}

TEST_CASE("zstd refuses a frame that declares more than its shape could need") {
  auto codec = builtinCodecs().make("int8+zstd");
  CHECK(codec->spec() == "int8+zstd");
  EncodedTensor encoded = builtinCodecs().make("zstd")->encode(torch::zeros({1024, 1024}));
  encoded.codec = "zstd";
  encoded.shape = {4, 4};  // a 64-byte tensor whose payload inflates to 4 MiB
  CHECK_THROWS_WITH(builtinCodecs().make("zstd")->decode(encoded), Catch::Contains("more than a tensor of its shape needs"));
}
