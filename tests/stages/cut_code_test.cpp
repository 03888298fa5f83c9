// A learned code at each cut (GptConfig::cutRank, model.subspace method "cut"): the stages
// of a model cut in three compose to the whole model with its cuts inside, k numbers a token
// cross each cut each way, and a stage refuses a code it cannot decode.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "scheduler/error.h"
#include "stages/models/gpt.h"
#include "stages/models/llama.h"
#include "stages/weights.h"
#include "tests/stages/subspace_fixtures.h"

using namespace skytrain::stages;
using skytrain::testing::byName;
using skytrain::testing::kRank;

namespace {

int64_t numel(const Stage& stage) {
  int64_t n = 0;
  for (const auto& p : stage.parameters()) n += p.numel();
  return n;
}

GptConfig cutGpt() {
  GptConfig c = skytrain::testing::tiny();
  c.subspaceRank = 0;
  c.cutRank = kRank;
  c.cuts = {1, 3};
  return c;
}

LlamaConfig cutLlama() {
  LlamaConfig c = skytrain::testing::tinyLlama();
  c.subspaceRank = 0;
  c.cutRank = kRank;
  c.cuts = {1, 3};
  return c;
}

// The whole model (cuts inside) against its three stages [0,1) [1,3) [3,4): the same
// weights, the same logits bit for bit, k-wide codes and gradients at each cut, and the same
// parameter gradients.
template <typename Make>
void composes(const Make& make, const std::vector<int64_t>& shape1, const std::vector<int64_t>& shape3) {
  torch::manual_seed(0);
  const at::Tensor ids = torch::randint(0, 50, {3, 12}, torch::kLong);
  const at::Tensor gradLogits = torch::randn({3, 12, 50});
  auto full = make(0, 4);
  auto a = make(0, 1);
  auto b = make(1, 3);
  auto c = make(3, 4);
  CHECK(shape1 == std::vector<int64_t>{3, 12, kRank});
  CHECK(shape3 == std::vector<int64_t>{3, 12, kRank});
  const auto reference = byName(full->namedParameters());
  size_t held = 0;
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, tensor] : part->namedParameters()) {
      INFO(name);
      REQUIRE(reference.count(name));
      CHECK(torch::equal(reference.at(name), tensor));
      ++held;
    }
  }
  CHECK(held == reference.size());  // each cut's sides split between the stages beside it
  CHECK(reference.count("cut1.encode.weight"));
  CHECK(reference.count("cut3.decode.weight"));
  CHECK(reference.count("cut3.tokens"));

  const at::Tensor expected = full->forward(0, ids);
  const at::Tensor first = a->forward(0, ids);
  CHECK(first.sizes() == c10::IntArrayRef({3, 12, kRank}));
  b->setTokens(ids);
  const at::Tensor second = b->forward(0, first);
  CHECK(second.sizes() == c10::IntArrayRef({3, 12, kRank}));
  c->setTokens(ids);
  CHECK(torch::equal(c->forward(0, second), expected));

  full->backward(0, gradLogits);
  const at::Tensor gradSecond = c->backward(0, gradLogits);
  CHECK(gradSecond.sizes() == c10::IntArrayRef({3, 12, kRank}));
  const at::Tensor gradFirst = b->backward(0, gradSecond);
  CHECK(gradFirst.sizes() == c10::IntArrayRef({3, 12, kRank}));
  CHECK_FALSE(a->backward(0, gradFirst).defined());
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, p] : part->namedParameters()) {
      INFO(name);
      REQUIRE(p.grad().defined());
      CHECK(torch::allclose(p.grad(), reference.at(name).grad(), 1e-5, 1e-7));
    }
  }
}

}  // namespace

TEST_CASE("a GPT with a learned code at its cuts, cut in three, computes the whole model; k numbers a token each way") {
  composes([](int first, int last) { return makeGptStage(cutGpt(), first, last, 7); }, gptInputShape(cutGpt(), 1, 3),
           gptInputShape(cutGpt(), 3, 3));
  for (const auto& [first, last] : std::vector<std::pair<int, int>>{{0, 4}, {0, 1}, {1, 3}, {3, 4}}) {
    INFO(first << "-" << last);
    CHECK(gptParameterCount(cutGpt(), first, last) == numel(*makeGptStage(cutGpt(), first, last, 7)));
  }
}

TEST_CASE("a LLaMA with a learned code at its cuts, cut in three, computes the whole model; k numbers a token each way") {
  composes([](int first, int last) { return makeLlamaStage(cutLlama(), first, last, 7); },
           llamaInputShape(cutLlama(), 1, 3), llamaInputShape(cutLlama(), 3, 3));
  for (const auto& [first, last] : std::vector<std::pair<int, int>>{{0, 4}, {0, 1}, {1, 3}, {3, 4}}) {
    INFO(first << "-" << last);
    CHECK(llamaParameterCount(cutLlama(), first, last) == numel(*makeLlamaStage(cutLlama(), first, last, 7)));
  }
}

TEST_CASE("a stage after a cut refuses a code it cannot decode: another width, no ids, ids out of the vocabulary") {
  auto b = makeGptStage(cutGpt(), 1, 3, 7);
  const at::Tensor ids = torch::zeros({2, 12}, torch::kLong);
  b->setTokens(ids);
  CHECK_THROWS_AS(b->forward(0, torch::zeros({2, 12, kRank + 1})), skytrain::Error);
  CHECK_THROWS_AS(b->forward(0, torch::zeros({2, 12})), skytrain::Error);
  b->setTokens(torch::zeros({2, 11}, torch::kLong));
  CHECK_THROWS_AS(b->forward(0, torch::zeros({2, 12, kRank})), skytrain::Error);
  b->setTokens(torch::full({2, 12}, 50, torch::kLong));
  CHECK_THROWS_AS(b->forward(0, torch::zeros({2, 12, kRank})), skytrain::Error);
  b->setTokens(torch::full({2, 12}, -1, torch::kLong));
  CHECK_THROWS_AS(b->forward(0, torch::zeros({2, 12, kRank})), skytrain::Error);
  b->setTokens(ids);
  CHECK(b->forward(0, torch::zeros({2, 12, kRank})).sizes() == c10::IntArrayRef({2, 12, kRank}));

  GptConfig bad = cutGpt();
  bad.cuts = {3, 1};
  CHECK_THROWS_AS(makeGptStage(bad, 0, 4, 7), skytrain::Error);
  bad.cuts = {0};
  CHECK_THROWS_AS(makeGptStage(bad, 0, 4, 7), skytrain::Error);
  bad = cutGpt();
  bad.subspaceRank = kRank;
  CHECK_THROWS_AS(makeGptStage(bad, 0, 4, 7), skytrain::Error);
}

TEST_CASE("a pretrained GPT converted to codes at its cuts: the same model at k = d_model, the embedding kept at any k") {
  GptConfig dense = skytrain::testing::tiny();
  dense.subspaceRank = 0;
  auto pretrained = makeGptStage(dense, 0, 4, 11);  // other weights than the seed 7 the codes start from
  const auto file = byName(pretrained->stateDict());
  const TensorLookup find = [&](const std::string& name) {
    const auto it = file.find(name);
    return it == file.end() ? at::Tensor() : it->second;
  };
  torch::manual_seed(1);
  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  const at::Tensor expected = pretrained->forward(0, ids);

  GptConfig whole = cutGpt();
  whole.cutRank = whole.dModel;
  auto converted = makeGptStage(whole, 0, 4, 7);
  const InitResult result = initialiseFrom(*converted, find, "pretrained");
  CHECK(result.fromSeed.empty());
  CHECK(torch::allclose(converted->forward(0, ids), expected, 1e-4, 1e-5));

  // k < d_model: the blocks and the first stage's embedding are the pretrained ones; the
  // stage after a cut rebuilds the embedding exactly from its anchor and the code of it.
  auto first = makeGptStage(cutGpt(), 0, 1, 7);
  auto second = makeGptStage(cutGpt(), 1, 3, 7);
  initialiseFrom(*first, find, "pretrained");
  initialiseFrom(*second, find, "pretrained");
  const auto converted2 = byName(second->namedParameters());
  CHECK(torch::equal(converted2.at("block1.attn.proj.weight"), file.at("block1.attn.proj.weight")));
  const at::Tensor u = converted2.at("cut1.decode.weight");
  CHECK(torch::allclose(u.t().mm(u), torch::eye(kRank), 1e-5, 1e-5));  // orthonormal columns
  const at::Tensor embedding = file.at("tok_emb.weight");
  const at::Tensor rebuilt = converted2.at("cut1.tokens") + embedding.mm(u).mm(u.t());
  CHECK(torch::allclose(rebuilt, embedding, 1e-5, 1e-6));

  // A crafted file: a NaN in a projection the basis is computed from.
  auto crafted = file;
  crafted["block0.proj.weight"] = file.at("block0.proj.weight").clone();
  crafted["block0.proj.weight"][0][0] = std::nanf("");
  const TensorLookup findCrafted = [&](const std::string& name) {
    const auto it = crafted.find(name);
    return it == crafted.end() ? at::Tensor() : it->second;
  };
  auto victim = makeGptStage(cutGpt(), 1, 3, 7);
  CHECK_THROWS_WITH(initialiseFrom(*victim, findCrafted, "crafted"), Catch::Contains("block0.proj.weight"));
}
