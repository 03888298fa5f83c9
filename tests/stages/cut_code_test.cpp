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

namespace {

// The whole model (both cuts inside) and its three stages, each with a sender's loss
// (`make(first, last)`), on the same ids and targets and the same factor: the stages' gradients,
// summed as the pipeline sums them, are the whole model's.
template <typename Make>
void checkSenderLossComposes(const Make& make) {
  torch::manual_seed(3);
  const at::Tensor ids = torch::randint(0, 50, {3, 12}, torch::kLong);
  const at::Tensor targets = torch::randint(0, 50, {3, 12}, torch::kLong);
  const at::Tensor gradLogits = torch::randn({3, 12, 50});
  auto full = make(0, 4);
  auto a = make(0, 1), b = make(1, 3), c = make(3, 4);
  // The whole model lists its parameters as its stages do, one after another (the order the
  // clipping norm sums them in).
  std::vector<std::string> wholeOrder, stagesOrder;
  for (const auto& [name, p] : full->namedParameters()) wholeOrder.push_back(name);
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, p] : part->namedParameters()) stagesOrder.push_back(name);
  }
  CHECK(wholeOrder == stagesOrder);
  REQUIRE(full->hasOwnLoss());
  REQUIRE(a->hasOwnLoss());
  REQUIRE(b->hasOwnLoss());
  CHECK_FALSE(c->hasOwnLoss());  // it sends no code
  for (auto* stage : {full.get(), a.get(), b.get(), c.get()}) {
    stage->setTokens(ids);
    stage->setTargets(targets);
    stage->setOwnLossFactor(0.25);
  }
  const at::Tensor expected = full->forward(0, ids);
  const at::Tensor second = b->forward(0, a->forward(0, ids));
  CHECK(second.sizes() == c10::IntArrayRef({3, 12, kRank}));  // nothing more crosses
  CHECK(torch::equal(c->forward(0, second), expected));
  full->backward(0, gradLogits);
  a->backward(0, b->backward(0, c->backward(0, gradLogits)));
  const auto fullParams = byName(full->namedParameters());
  size_t heads = 0;
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, p] : part->namedParameters()) {
      INFO(name);
      REQUIRE(p.grad().defined());
      CHECK(torch::allclose(p.grad(), fullParams.at(name).grad(), 1e-5, 1e-7));
      heads += name.find(".sender_head.") != std::string::npos ? 1 : 0;
    }
  }
  CHECK(heads == 2);
  // Validation computes no sender's loss and needs no targets.
  auto fresh = make(0, 1);
  CHECK_NOTHROW(fresh->infer(ids));
  CHECK_THROWS_WITH(fresh->forward(0, ids), Catch::Contains("needs the int64 targets"));
}

}  // namespace

TEST_CASE("a sender's own loss: the stage before each cut also predicts the next token from the state it encodes") {
  GptConfig c = cutGpt();
  c.senderLoss = 0.5;
  auto a = makeGptStage(c, 0, 1, 7);  // ends at the cut before layer 1
  const auto named = byName(a->namedParameters());
  REQUIRE(named.count("cut1.sender_head.weight"));
  CHECK(named.at("cut1.sender_head.weight").sizes() == c10::IntArrayRef({50, 32}));
  CHECK(torch::equal(named.at("cut1.sender_norm.weight"), torch::ones({32})));
  CHECK(torch::equal(named.at("cut1.sender_norm.bias"), torch::zeros({32})));
  CHECK_FALSE(makeGptStage(cutGpt(), 0, 1, 7)->hasOwnLoss());
  for (const auto& [first, last] : std::vector<std::pair<int, int>>{{0, 4}, {0, 1}, {1, 3}, {3, 4}}) {
    INFO(first << "-" << last);
    CHECK(gptParameterCount(c, first, last) == numel(*makeGptStage(c, first, last, 7)));
  }
  CHECK(gptInputShape(c, 1, 3) == gptInputShape(cutGpt(), 1, 3));
  CHECK(gptStashBytesPerSample(c, 0, 1) == gptStashBytesPerSample(cutGpt(), 0, 1) + 4.0 * 2 * 12 * 50);

  // By hand: block 0's output h, from the same model without a code (same seed: the same
  // draws), is what the stage encodes; its gradient is the code's plus the factor times
  // W x cross-entropy(head(norm(h)), targets).
  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  const at::Tensor targets = torch::randint(0, 50, {2, 12}, torch::kLong);
  a->setTargets(targets);
  a->setOwnLossFactor(0.25);
  const at::Tensor code = a->forward(0, ids);
  const at::Tensor gradCode = torch::randn_like(code);
  a->backward(0, gradCode);

  GptConfig plain = cutGpt();
  plain.cutRank = 0;
  plain.cuts.clear();
  auto reference = makeGptStage(plain, 0, 1, 7);
  const at::Tensor h = reference->forward(0, ids).requires_grad_(true);
  const at::Tensor encode = named.at("cut1.encode.weight").detach().clone().requires_grad_(true);
  const at::Tensor head = named.at("cut1.sender_head.weight").detach().clone().requires_grad_(true);
  const at::Tensor sent = torch::matmul(h, encode.t());
  CHECK(torch::allclose(sent, code, 1e-5, 1e-6));
  const at::Tensor normed = torch::layer_norm(h, {32});
  const at::Tensor own = torch::nn::functional::cross_entropy(torch::matmul(normed, head.t()).reshape({-1, 50}),
                                                               targets.reshape({-1}));
  ((sent * gradCode).sum() + 0.25 * 0.5 * own).backward();
  reference->backward(0, h.grad());
  CHECK(torch::allclose(named.at("cut1.sender_head.weight").grad(), head.grad(), 1e-5, 1e-7));
  CHECK(torch::allclose(named.at("cut1.encode.weight").grad(), encode.grad(), 1e-5, 1e-7));
  // Its value, unweighted, the mean over the forwards that trained since it was last taken.
  CHECK(makeGptStage(cutGpt(), 0, 1, 7)->takeSenderLosses().empty());  // no sender's loss
  const auto losses = a->takeSenderLosses();
  REQUIRE(losses.size() == 1);
  CHECK(losses.at(1) == Approx(own.item<double>()).epsilon(1e-5));
  CHECK(a->takeSenderLosses().empty());  // taken
  a->infer(ids);
  CHECK(a->takeSenderLosses().empty());  // validation is not training
  const at::Tensor others = torch::randint(0, 50, {2, 12}, torch::kLong);
  for (int i : {1, 2}) {
    a->setTargets(i == 1 ? targets : others);
    a->forward(i, ids);
  }
  const at::Tensor second = torch::nn::functional::cross_entropy(
      torch::matmul(normed, head.t()).reshape({-1, 50}), others.reshape({-1}));
  CHECK(a->takeSenderLosses().at(1) == Approx((own + second).item<double>() / 2).epsilon(1e-5));
  const auto expected = byName(reference->namedParameters());
  for (const auto& name : {"tok_emb.weight", "pos_emb", "block0.attn.qkv.weight", "block0.proj.weight"}) {
    INFO(name);
    REQUIRE(expected.count(name));
    CHECK(torch::allclose(named.at(name).grad(), expected.at(name).grad(), 1e-5, 1e-7));
  }

  checkSenderLossComposes([&c](int first, int last) { return makeGptStage(c, first, last, 7); });
}

TEST_CASE("a LLaMA's sender's loss: its own RMSNorm and head, composing across any cut") {
  LlamaConfig c = cutLlama();
  c.senderLoss = 0.5;
  const auto named = byName(makeLlamaStage(c, 1, 3, 7)->namedParameters());
  CHECK(named.count("cut3.sender_norm.weight"));
  CHECK_FALSE(named.count("cut3.sender_norm.bias"));
  CHECK_FALSE(named.count("cut1.sender_head.weight"));  // the stage before it sends that code
  for (const auto& [first, last] : std::vector<std::pair<int, int>>{{0, 4}, {0, 1}, {1, 3}, {3, 4}}) {
    INFO(first << "-" << last);
    CHECK(llamaParameterCount(c, first, last) == numel(*makeLlamaStage(c, first, last, 7)));
  }
  checkSenderLossComposes([&c](int first, int last) { return makeLlamaStage(c, first, last, 7); });
  LlamaConfig shared = skytrain::testing::tinyLlama();
  shared.senderLoss = 0.5;  // a shared subspace has no code
  CHECK_THROWS_WITH(makeLlamaStage(shared, 0, 4, 7), Catch::Contains("sender's loss"));
}
