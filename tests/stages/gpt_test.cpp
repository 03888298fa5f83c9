#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <map>

#include "scheduler/error.h"
#include "stages/gpt.h"

using namespace skytrain::stages;

namespace {

GptConfig tiny() {
  GptConfig c;
  c.vocabSize = 50;
  c.dModel = 32;
  c.heads = 4;
  c.layers = 4;
  c.dFf = 64;
  c.seqLen = 12;
  return c;
}

std::map<std::string, at::Tensor> byName(const Stage& stage) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, tensor] : stage.stateDict()) out[name] = tensor;
  return out;
}

}  // namespace

TEST_CASE("a split model has exactly the unsplit model's weights") {
  auto full = makeGptStage(tiny(), 0, 4, 99);
  auto a = makeGptStage(tiny(), 0, 1, 99);
  auto b = makeGptStage(tiny(), 1, 3, 99);
  auto c = makeGptStage(tiny(), 3, 4, 99);
  const auto reference = byName(*full);
  size_t seen = 0;
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, tensor] : byName(*part)) {
      INFO(name);
      REQUIRE(reference.count(name));
      CHECK(torch::equal(reference.at(name), tensor));
      ++seen;
    }
  }
  CHECK(seen == reference.size());
  CHECK(gptParameterCount(tiny(), 0, 4) ==
        gptParameterCount(tiny(), 0, 1) + gptParameterCount(tiny(), 1, 3) + gptParameterCount(tiny(), 3, 4));
  int64_t counted = 0;
  for (const auto& p : full->parameters()) counted += p.numel();
  CHECK(counted == gptParameterCount(tiny(), 0, 4));
}

TEST_CASE("another seed gives other weights") {
  auto x = byName(*makeGptStage(tiny(), 0, 4, 1));
  auto y = byName(*makeGptStage(tiny(), 0, 4, 2));
  CHECK_FALSE(torch::equal(x.at("block2.attn.qkv.weight"), y.at("block2.attn.qkv.weight")));
}

TEST_CASE("chained stages compute the unsplit model's output and gradients") {
  torch::manual_seed(0);
  const at::Tensor ids = torch::randint(0, 50, {3, 12}, torch::kLong);
  const at::Tensor gradLogits = torch::randn({3, 12, 50});
  auto full = makeGptStage(tiny(), 0, 4, 7);
  auto head = makeGptStage(tiny(), 0, 2, 7);
  auto tail = makeGptStage(tiny(), 2, 4, 7);

  const at::Tensor expected = full->forward(0, ids);
  CHECK(full->backward(0, gradLogits).defined() == false);  // token ids have no gradient

  const at::Tensor hidden = head->forward(5, ids);
  const at::Tensor logits = tail->forward(5, hidden);
  CHECK(torch::allclose(logits, expected, 1e-5, 1e-5));
  CHECK(tail->inFlight() == 1);
  const at::Tensor gradHidden = tail->backward(5, gradLogits);
  REQUIRE(gradHidden.defined());
  head->backward(5, gradHidden);
  CHECK(tail->inFlight() == 0);

  auto fullGrads = std::map<std::string, at::Tensor>();
  for (const auto& [name, p] : full->stateDict()) fullGrads[name] = p.grad();
  for (const auto* part : {head.get(), tail.get()}) {
    for (const auto& [name, p] : part->stateDict()) {
      INFO(name);
      CHECK(torch::allclose(p.grad(), fullGrads.at(name), 1e-4, 1e-6));
    }
  }
}

TEST_CASE("micro-batches may be in flight together and finish in any order") {
  auto stage = makeGptStage(tiny(), 1, 3, 7);
  const at::Tensor x0 = torch::randn({2, 12, 32}), x1 = torch::randn({2, 12, 32});
  stage->forward(0, x0);
  stage->forward(1, x1);
  CHECK(stage->inFlight() == 2);
  CHECK(stage->backward(1, torch::ones({2, 12, 32})).sizes() == x1.sizes());
  CHECK(stage->backward(0, torch::ones({2, 12, 32})).sizes() == x0.sizes());
  CHECK_THROWS_AS(stage->backward(0, torch::ones({2, 12, 32})), skytrain::InternalError);
}

TEST_CASE("bad ranges, configs and inputs are refused") {
  CHECK_THROWS_AS(makeGptStage(tiny(), 2, 2, 0), skytrain::Error);
  CHECK_THROWS_AS(makeGptStage(tiny(), 0, 5, 0), skytrain::Error);
  GptConfig odd = tiny();
  odd.heads = 5;
  CHECK_THROWS_WITH(makeGptStage(odd, 0, 4, 0), Catch::Contains("divisible"));
  auto first = makeGptStage(tiny(), 0, 2, 0);
  CHECK_THROWS_WITH(first->forward(0, torch::randn({2, 12})), Catch::Contains("token ids"));
  CHECK_THROWS_WITH(first->forward(1, torch::zeros({2, 13}, torch::kLong)), Catch::Contains("sequence length"));
  auto middle = makeGptStage(tiny(), 1, 3, 0);
  middle->forward(0, torch::randn({2, 12, 32}));
  CHECK_THROWS_WITH(middle->backward(0, torch::randn({2, 11, 32})), Catch::Contains("shape"));
}
