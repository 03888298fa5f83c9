// A learned code at each cut (GptConfig::cutRank, model.subspace method "cut"): the stages
// of a model cut in three compose to the whole model with its cuts inside, k numbers a token
// cross each cut each way (checkComposesInThree), a stage refuses a code it cannot decode, and a
// model with codes loads (init_from) only into the same cuts.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "scheduler/error.h"
#include "stages/models/gpt.h"
#include "stages/models/llama.h"
#include "stages/weights/weights.h"
#include "tests/stages/subspace_fixtures.h"

using namespace skytrain::stages;
using skytrain::testing::byName;
using skytrain::testing::checkComposesInThree;
using skytrain::testing::kRank;
using skytrain::testing::lookupIn;

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

}  // namespace

TEST_CASE("a GPT with a learned code at its cuts, cut in three, computes the whole model; k numbers a token each way") {
  CHECK(gptInputShape(cutGpt(), 1, 3) == std::vector<int64_t>{3, 12, kRank});
  CHECK(gptInputShape(cutGpt(), 3, 3) == std::vector<int64_t>{3, 12, kRank});
  auto full = checkComposesInThree([](int first, int last) { return makeGptStage(cutGpt(), first, last, 7); }, kRank);
  const auto names = byName(full->namedParameters());
  CHECK(names.count("cut1.encode.weight"));
  CHECK(names.count("cut3.decode.weight"));
  CHECK(names.count("cut3.positions"));
  for (const auto& [first, last] : std::vector<std::pair<int, int>>{{0, 4}, {0, 1}, {1, 3}, {3, 4}}) {
    INFO(first << "-" << last);
    CHECK(gptParameterCount(cutGpt(), first, last) == numel(*makeGptStage(cutGpt(), first, last, 7)));
  }
}

TEST_CASE("a LLaMA with a learned code at its cuts, cut in three, computes the whole model; k numbers a token each way") {
  CHECK(llamaInputShape(cutLlama(), 1, 3) == std::vector<int64_t>{3, 12, kRank});
  CHECK(llamaInputShape(cutLlama(), 3, 3) == std::vector<int64_t>{3, 12, kRank});
  auto full = checkComposesInThree([](int first, int last) { return makeLlamaStage(cutLlama(), first, last, 7); }, kRank);
  CHECK(byName(full->namedParameters()).count("cut3.tokens"));
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

TEST_CASE("a stage after a cut reports how much of its state each code carries, from its last forward that trained") {
  auto b = makeGptStage(cutGpt(), 1, 3, 7);  // decodes the code before layer 1; encodes the one before 3
  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  const at::Tensor code = torch::randn({2, 12, kRank});
  b->setTokens(ids);
  CHECK(b->codeShares().empty());  // nothing trained yet
  b->infer(code);
  CHECK(b->codeShares().empty());  // validation is not training
  b->forward(0, code);
  const auto shares = b->codeShares();
  REQUIRE(shares.size() == 1);
  REQUIRE(shares.count(1));
  // By hand: the norm of decode(code) over the norm of tokens[ids] + positions + decode(code).
  const auto named = byName(b->namedParameters());
  const at::Tensor decoded = torch::matmul(code, named.at("cut1.decode.weight").t());
  const at::Tensor h = named.at("cut1.tokens").index_select(0, ids.flatten()).view({2, 12, -1}) +
                       named.at("cut1.positions").slice(0, 0, 12) + decoded;
  CHECK(shares.at(1) > 0.0);
  CHECK(shares.at(1) == Approx((decoded.norm() / h.norm()).item<double>()).epsilon(1e-5));
  {
    torch::NoGradGuard noGrad;
    named.at("cut1.decode.weight").zero_();  // a code that decodes to nothing carries nothing
  }
  b->forward(1, code);
  CHECK(b->codeShares().at(1) == 0.0);
  auto first = makeGptStage(cutGpt(), 0, 1, 7);  // sends a code, decodes none
  first->forward(0, ids);
  CHECK(first->codeShares().empty());
  auto llama = makeLlamaStage(cutLlama(), 3, 4, 7);
  llama->setTokens(ids);
  llama->forward(0, code);
  CHECK(llama->codeShares().count(3));
}

TEST_CASE("a pretrained GPT converted to codes at its cuts: the same model at k = d_model, the embedding kept at any k") {
  GptConfig dense = skytrain::testing::tiny();
  dense.subspaceRank = 0;
  auto pretrained = makeGptStage(dense, 0, 4, 11);  // other weights than the seed 7 the codes start from
  const auto file = byName(pretrained->stateDict());
  const TensorLookup find = lookupIn(file);
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
  const TensorLookup findCrafted = lookupIn(crafted);
  auto victim = makeGptStage(cutGpt(), 1, 3, 7);
  CHECK_THROWS_WITH(initialiseFrom(*victim, findCrafted, "crafted"), Catch::Contains("block0.proj.weight"));
}

TEST_CASE("a model with codes loads only with the same cuts: codes at other layers, or one dropped, are refused") {
  auto source = makeGptStage(cutGpt(), 0, 4, 11);  // a whole model with codes before layers 1 and 3
  const auto file = byName(source->stateDict());
  const TensorLookup find = lookupIn(file);
  auto same = makeGptStage(cutGpt(), 1, 3, 7);  // the same cuts: every tensor by name
  CHECK(initialiseFrom(*same, find, "cut model").fromSeed.empty());
  CHECK(torch::equal(byName(same->namedParameters()).at("cut1.decode.weight"), file.at("cut1.decode.weight")));
  // A stage's own tensors (its checkpoint holds the codes of its cuts only): by name too.
  const auto stageFile = byName(makeGptStage(cutGpt(), 0, 1, 11)->stateDict());
  auto first = makeGptStage(cutGpt(), 0, 1, 7);
  const InitResult fromStage = initialiseFrom(*first, lookupIn(stageFile), "stage 0");
  CHECK(fromStage.fromSeed.empty());
  CHECK(torch::equal(byName(first->namedParameters()).at("cut1.encode.weight"), file.at("cut1.encode.weight")));

  GptConfig moved = cutGpt();
  moved.cuts = {2};
  auto elsewhere = makeGptStage(moved, 0, 2, 7);
  CHECK_THROWS_WITH(initialiseFrom(*elsewhere, find, "cut model"),
                    Catch::Contains("codes before layers [1, 3]") && Catch::Contains("cuts before [2]"));
  GptConfig fewer = cutGpt();
  fewer.cuts = {1};
  auto dropped = makeGptStage(fewer, 1, 4, 7);  // cut 1 is in the file, cut 3 would be dropped
  CHECK_THROWS_WITH(initialiseFrom(*dropped, find, "cut model"),
                    Catch::Contains("codes before layers [1, 3]") && Catch::Contains("cuts before [1]"));
}
