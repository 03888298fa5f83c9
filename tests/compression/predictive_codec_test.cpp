// "<inner>+pred" (compression/codecs/predictive_codec.cpp): its error bound, both ends' tables
// staying equal, what the prediction gains on activations that follow their tokens, its
// state, and its refusals.
#include <catch2/catch.hpp>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>

#include "compression/codec_registry.h"
#include "compression/kernels/prediction_kernels.h"
#include "compression/side_tokens.h"
#include "scheduler/error.h"

using namespace skytrain::compression;

namespace {

constexpr int64_t kB = 4, kT = 16, kD = 64, kVocab = 20;
constexpr int kLearnEvery = static_cast<int>(prediction::kLearnEvery);  // messages 0, kLearnEvery, ... teach

// The prediction the codec's state makes for these IDs (below kVocab, width d):
// by_token[id] + by_position[t].
at::Tensor predictionOf(const Codec& codec, const at::Tensor& ids, int64_t d = kD) {
  at::Tensor token, position;
  for (const auto& [name, tensor] : codec.state()) {
    if (name == "by_token") token = tensor;
    if (name == "by_position") position = tensor;
  }
  if (!token.defined()) return torch::zeros({ids.size(0), ids.size(1), d});
  const at::Tensor padded = torch::cat({token, torch::zeros({std::max<int64_t>(0, kVocab - token.size(0)), d})});
  return padded.index_select(0, ids.reshape({-1})).reshape({ids.size(0), ids.size(1), d}) +
         position.narrow(0, 0, ids.size(1)).unsqueeze(0);
}

// Activations that are mostly their token's and position's vectors, as early in a GPT.
struct Source {
  at::Tensor embedding = torch::randn({kVocab, kD}) * 3;
  at::Tensor positions = torch::randn({kT, kD});
  at::Tensor ids(int64_t seed) const {
    return torch::randint(0, kVocab, {kB, kT}, at::make_generator<at::CPUGeneratorImpl>(seed), torch::kLong);
  }
  at::Tensor activation(const at::Tensor& ids) const {
    return embedding.index_select(0, ids.reshape({-1})).reshape({kB, kT, kD}) + positions.unsqueeze(0) +
           torch::randn({kB, kT, kD}) * 0.3;
  }
};

at::Tensor blockAbsMax64(const at::Tensor& x) {
  const auto m = x.reshape({-1, 64}).abs().amax(1, true).expand({x.numel() / 64, 64});
  return m.reshape(x.sizes());
}

void setTokens(Codec& codec, const at::Tensor& ids) {
  auto* conditioned = tokenConditioned(codec);
  REQUIRE(conditioned);
  conditioned->setTokens(ids);
}

}  // namespace

TEST_CASE("q13+pred: q13's bound on the residual, the same tables at both ends, and a smaller error") {
  torch::manual_seed(3);
  const Source source;
  auto sender = builtinCodecs().make("q13+pred");
  auto receiver = builtinCodecs().make("q13+pred");
  auto plain = builtinCodecs().make("q13");
  CHECK(sender->spec() == "q13+pred");
  double firstError = 0, lastError = 0, plainError = 0;
  for (int message = 0; message < 4 * kLearnEvery; ++message) {
    const at::Tensor ids = source.ids(message);
    const at::Tensor x = source.activation(ids);
    const at::Tensor residual = x - predictionOf(*sender, ids);  // what q13 quantises
    setTokens(*sender, ids);
    setTokens(*receiver, ids);
    const EncodedTensor encoded = sender->encode(x);
    CHECK(encoded.codec == "q13+pred");
    CHECK(encoded.payload.size() == static_cast<size_t>(kB * kT * kD / 64 * 32));  // q13's: 8x
    const at::Tensor decoded = receiver->decode(encoded);
    REQUIRE(decoded.sizes() == x.sizes());
    const at::Tensor bound = blockAbsMax64(residual) / 12 * (1 + std::ldexp(1.0, -7)) * (1 + 1e-5) + 1e-6;
    CHECK(((decoded - x).abs() - bound).max().item<double>() <= 0.0);
    // Both ends learnt from the same decoded residual: their tables are equal, bit for bit.
    const auto a = sender->state(), b = receiver->state();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].first == b[i].first);
      CHECK(torch::equal(a[i].second, b[i].second));
    }
    const double error = (decoded - x).pow(2).mean().item<double>();
    if (message == 0) firstError = error;
    lastError = error;
    plainError = (plain->decode(plain->encode(x)) - x).pow(2).mean().item<double>();
  }
  // The first message has no prediction: q13's own error. By the last the tables have learnt
  // from four messages and hold the tokens' and positions' vectors: what is left to quantise
  // is mostly the small noise.
  CHECK(firstError == Approx(plainError).epsilon(0.5));
  CHECK(lastError < plainError / 20);
}

// A width that is a multiple of 64 runs the fused kernels (the prediction taken off and added
// back in registers, compression/kernels/rotated_blocks.h); 96 runs the prediction as its own pass.
// Both must be the inner codec on x - prediction, and its decoding + prediction, bit for bit,
// and the tables must learn what the header's formulas give from the decoded residual.
// (One chunk of rows for int3, whose layout is per chunk; q13's is not, so 192 spans two.)
TEST_CASE("<inner>+pred is the inner codec on the residual, fused or not") {
  for (const auto& [inner, d] : std::vector<std::pair<std::string, int64_t>>{
           {"q13", 64}, {"q13", 96}, {"q13", 192}, {"q13+rot", 64}, {"q13+rot", 96}, {"q13+rot", 192},
           {"int3", 64}, {"int3", 96}, {"int3+rot", 64}, {"int3+rot", 96}}) {
    INFO(inner << "+pred, d = " << d);
    torch::manual_seed(5);
    const at::Tensor embedding = torch::randn({kVocab, d}) * 3, positions = torch::randn({kT, d});
    auto sender = builtinCodecs().make(inner + "+pred");
    auto receiver = builtinCodecs().make(inner + "+pred");
    auto plain = builtinCodecs().make(inner);
    at::Tensor token = torch::zeros({kVocab, d}), position = torch::zeros({kT, d});  // what they should learn
    for (int message = 0; message < kLearnEvery + 2; ++message) {  // two of them teach the tables
      const at::Tensor ids =
          torch::randint(0, kVocab, {kB, kT}, at::make_generator<at::CPUGeneratorImpl>(message), torch::kLong);
      const at::Tensor x = embedding.index_select(0, ids.reshape({-1})).reshape({kB, kT, d}) + positions.unsqueeze(0) +
                           torch::randn({kB, kT, d}) * 0.3;
      const at::Tensor prediction = predictionOf(*sender, ids, d);
      setTokens(*sender, ids);
      setTokens(*receiver, ids);
      const EncodedTensor encoded = sender->encode(x);
      CHECK(encoded.payload == plain->encode(x - prediction).payload);
      EncodedTensor asPlain = encoded;
      asPlain.codec = inner;
      const at::Tensor residual = plain->decode(asPlain).reshape({kB, kT, d});
      const at::Tensor decoded = receiver->decode(encoded);
      CHECK(torch::equal(decoded, residual + prediction));
      CHECK(torch::equal(predictionOf(*sender, ids, d), predictionOf(*receiver, ids, d)));
      if (message % kLearnEvery == 0) {  // the header's update, from the decoded residual r'
        const at::Tensor flat = residual.reshape({-1, d}), id = ids.reshape({-1});
        const at::Tensor counts = torch::zeros({kVocab}).index_add_(0, id, torch::ones({kB * kT}));
        const at::Tensor means = torch::zeros({kVocab, d}).index_add_(0, id, flat) / counts.clamp_min(1).unsqueeze(1);
        token += 0.5 * means;
        position += 0.5 * (residual - 0.5 * means.index_select(0, id).reshape({kB, kT, d})).mean(0);
      }
      for (const auto& [name, table] : sender->state()) {
        if (name == "by_token") CHECK(torch::allclose(table, token.narrow(0, 0, table.size(0)), 1e-5, 1e-6));
        if (name == "by_position") CHECK(torch::allclose(table, position, 1e-5, 1e-6));
      }
    }
  }
}

TEST_CASE("q13+pred: a codec loaded with another's state encodes the next message as it would") {
  torch::manual_seed(4);
  const Source source;
  auto original = builtinCodecs().make("q13+rot+pred");
  for (int message = 0; message < kLearnEvery - 1; ++message) {
    const at::Tensor ids = source.ids(message);
    setTokens(*original, ids);
    original->encode(source.activation(ids));
  }
  auto restored = builtinCodecs().make("q13+rot+pred");
  restored->loadState(original->state());
  // The next three: the tables as they are, one that teaches them, and one that shows what
  // they learnt (the message count is part of the state).
  for (int message = kLearnEvery - 1; message < kLearnEvery + 2; ++message) {
    const at::Tensor ids = source.ids(message);
    const at::Tensor x = source.activation(ids);
    setTokens(*original, ids);
    setTokens(*restored, ids);
    CHECK(original->encode(x).payload == restored->encode(x).payload);
  }
  const at::Tensor ids = source.ids(9);
  const at::Tensor x = source.activation(ids);

  SECTION("an empty state starts the stream afresh") {
    auto fresh = builtinCodecs().make("q13+rot+pred");
    restored->loadState({});
    setTokens(*fresh, ids);
    setTokens(*restored, ids);
    CHECK(fresh->encode(x).payload == restored->encode(x).payload);
  }
  SECTION("bad tables are refused") {
    auto state = original->state();
    auto withTable = [&](const std::string& name, const at::Tensor& t) {
      CodecState out;
      for (const auto& [n, tensor] : state) out.emplace_back(n, n == name ? t : tensor);
      return out;
    };
    CHECK_THROWS_AS(restored->loadState(withTable("by_token", torch::zeros({kVocab, kD + 1}))), skytrain::WireError);
    CHECK_THROWS_AS(restored->loadState(withTable("by_position", torch::zeros({kT, kD}, torch::kDouble))), skytrain::WireError);
    CHECK_THROWS_AS(restored->loadState(withTable("by_token", torch::zeros({kD}))), skytrain::WireError);
    CHECK_THROWS_AS(restored->loadState({state.front()}), skytrain::WireError);
    CHECK_THROWS_AS(restored->loadState({{"other", torch::zeros({1})}}), skytrain::WireError);
    CHECK_THROWS_AS(restored->loadState(withTable("messages", torch::tensor(-1, torch::kLong))), skytrain::WireError);
    CHECK_THROWS_AS(restored->loadState(withTable("messages", torch::zeros({2}, torch::kLong))), skytrain::WireError);
  }
}

TEST_CASE("q13+pred refuses what it cannot carry") {
  auto codec = builtinCodecs().make("q13+pred");
  const at::Tensor x = torch::randn({kB, kT, kD});
  CHECK_THROWS_WITH(codec->encode(x), Catch::Contains("needs the micro-batch's token IDs"));
  setTokens(*codec, torch::zeros({kB, kT}, torch::kLong));
  CHECK_THROWS_WITH(codec->encode(torch::randn({kB, kT + 1, kD})), Catch::Contains("does not match token IDs"));
  CHECK_THROWS_WITH(codec->encode(torch::randn({kB * kT, kD})), Catch::Contains("[B, T, d]"));
  CHECK_THROWS_AS(tokenConditioned(*codec)->setTokens(torch::zeros({kB, kT})), skytrain::Error);  // not integer
  CHECK_THROWS_AS(tokenConditioned(*codec)->setTokens(torch::full({kB, kT}, -1, torch::kLong)), skytrain::Error);

  const EncodedTensor encoded = codec->encode(x);
  EncodedTensor truncated = encoded;
  truncated.payload.pop_back();
  CHECK_THROWS_AS(codec->decode(truncated), skytrain::WireError);
  EncodedTensor otherShape = encoded;
  otherShape.shape = {kB, kT, kD * 2};  // another width than the stream's
  CHECK_THROWS_AS(codec->decode(otherShape), skytrain::WireError);
  otherShape.shape = {kB + 1, kT, kD};  // not the IDs' batch
  CHECK_THROWS_AS(codec->decode(otherShape), skytrain::WireError);
  CHECK_THROWS_WITH(codec->encode(torch::tensor({std::nanf("")}).expand({kB, kT, kD}).contiguous()), Catch::Contains("NaN/Inf"));

  // An empty micro-batch round-trips and teaches the tables nothing.
  auto empty = builtinCodecs().make("q13+pred");
  setTokens(*empty, torch::zeros({0, kT}, torch::kLong));
  CHECK(empty->decode(empty->encode(torch::zeros({0, kT, kD}))).sizes() == torch::IntArrayRef({0, kT, kD}));
  setTokens(*empty, torch::zeros({kB, 0}, torch::kLong));
  CHECK(empty->decode(empty->encode(torch::zeros({kB, 0, kD}))).numel() == 0);
  for (const auto& [name, table] : empty->state()) CHECK(table.abs().sum().item<double>() == 0.0);

  const auto& registry = builtinCodecs();
  CHECK_THROWS_WITH(registry.make("pred"), Catch::Contains("needs a codec left of it"));
  CHECK_THROWS_WITH(registry.make("pred+q13"), Catch::Contains("must be the last element"));
  CHECK_THROWS_WITH(registry.make("q13+pred+zstd"), Catch::Contains("must be the last element"));
  CHECK_THROWS_WITH(registry.make("q13+pred:2"), Catch::Contains("no argument"));
  CHECK_THROWS_WITH(registry.make("ef(q13+pred)"), Catch::Contains("cannot wrap"));
  CHECK(needsTokens("ef(q13+rot)+pred"));
  CHECK_FALSE(needsTokens("q13+rot"));
  CHECK(tokenConditioned(*registry.make("ef(q13+rot)+pred")));
  CHECK_FALSE(tokenConditioned(*registry.make("q13")));
}
