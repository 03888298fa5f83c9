// A subspace GPT (GptConfig::subspaceRank): cut anywhere, k numbers a token cross each way,
// and the stages compose to the unsplit model.
#include <catch2/catch.hpp>
#include <torch/torch.h>
#include <xxhash.h>

#include <string>
#include <vector>

#include "scheduler/error.h"
#include "stages/models/gpt.h"
#include "stages/models/llama.h"
#include "tests/stages/subspace_fixtures.h"

using namespace skytrain::stages;
using skytrain::testing::byName;
using skytrain::testing::checkComposesInThree;
using skytrain::testing::kRank;
using skytrain::testing::tiny;
using skytrain::testing::tinyLlama;


TEST_CASE("a subspace model cut in three computes the unsplit model's output, k numbers a token at each cut") {
  CHECK(gptInputShape(tiny(), 1, 3) == std::vector<int64_t>{3, 12, kRank});
  CHECK(gptInputShape(tiny(), 3, 3) == std::vector<int64_t>{3, 12, kRank});
  // The same weights and the same frozen frame in every stage; the same logits to the bit.
  checkComposesInThree([](int first, int last) { return makeGptStage(tiny(), first, last, 7); }, kRank);
}

TEST_CASE("the frame is fixed: an orthonormal basis and frozen tables, no optimizer state; the rest is k wide") {
  auto full = makeGptStage(tiny(), 0, 4, 7);
  const auto state = byName(full->stateDict());
  const at::Tensor basis = state.at("subspace.basis");
  CHECK(basis.sizes() == c10::IntArrayRef({32, kRank}));
  CHECK(torch::allclose(basis.t().matmul(basis), torch::eye(kRank), 1e-5, 1e-6));
  CHECK(state.at("subspace.tokens").sizes() == c10::IntArrayRef({50, 32}));
  CHECK(state.at("tok_emb.weight").sizes() == c10::IntArrayRef({50, kRank}));
  CHECK(state.at("pos_emb").sizes() == c10::IntArrayRef({12, kRank}));
  CHECK(state.at("block2.attn.proj.weight").sizes() == c10::IntArrayRef({kRank, 32}));
  CHECK(state.at("block2.proj.weight").sizes() == c10::IntArrayRef({kRank, 64}));
  int64_t trained = 0;
  for (const auto& p : full->parameters()) trained += p.numel();
  const int64_t frame = 50 * 32 + 12 * 32 + 32 * kRank;
  CHECK(trained + frame == gptParameterCount(tiny(), 0, 4));
  CHECK(gptParameterCount(tiny(), 0, 4) + 2 * frame ==
        gptParameterCount(tiny(), 0, 1) + gptParameterCount(tiny(), 1, 3) + gptParameterCount(tiny(), 3, 4));
  // Another seed, another frame.
  auto other = byName(makeGptStage(tiny(), 0, 4, 8)->stateDict());
  CHECK_FALSE(torch::equal(other.at("subspace.basis"), basis));
}

TEST_CASE("a subspace stage refuses input it cannot rebuild h from") {
  auto b = makeGptStage(tiny(), 1, 3, 7);
  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  // No token ids given.
  CHECK_THROWS_WITH(b->forward(0, torch::randn({2, 12, kRank})), Catch::Contains("needs the token ids"));
  b->setTokens(ids);
  CHECK_THROWS_WITH(b->forward(1, torch::randn({2, 12, 32})), Catch::Contains("expects coefficients [batch, seq, 4]"));
  b->setTokens(torch::randint(0, 50, {3, 12}, torch::kLong));  // another micro-batch's ids
  CHECK_THROWS_WITH(b->forward(2, torch::randn({2, 12, kRank})), Catch::Contains("needs the token ids"));
  CHECK(b->inFlight() == 0);

  GptConfig bad = tiny();
  bad.subspaceRank = 33;
  CHECK_THROWS_AS(makeGptStage(bad, 0, 4, 1), skytrain::Error);
  bad = tiny();
  bad.split.block = 1;
  CHECK_THROWS_WITH(makeGptStage(bad, 0, 4, 1), Catch::Contains("subspace"));
}

TEST_CASE("a subspace LLaMA cut in three computes the unsplit model, k numbers a token at each cut") {
  LlamaConfig c = tinyLlama();
  CHECK(llamaInputShape(c, 2, 2) == std::vector<int64_t>{2, 12, kRank});
  auto full = checkComposesInThree([&](int first, int last) { return makeLlamaStage(c, first, last, 5); }, kRank);
  int64_t trained = 0;
  for (const auto& p : full->parameters()) trained += p.numel();
  CHECK(trained + 50 * 32 + 32 * kRank == llamaParameterCount(c, 0, 4));  // + the frozen frame
  CHECK(byName(full->stateDict()).at("block1.attn.o.weight").sizes() == c10::IntArrayRef({kRank, 32}));
  CHECK(byName(full->stateDict()).at("block1.mlp.down.weight").sizes() == c10::IntArrayRef({kRank, 48}));
  // Without ids after the first stage, refused.
  torch::manual_seed(1);
  const at::Tensor first = makeLlamaStage(c, 0, 1, 5)->forward(0, torch::randint(0, 50, {2, 12}, torch::kLong));
  auto lone = makeLlamaStage(c, 1, 3, 5);
  CHECK_THROWS_WITH(lone->forward(0, first), Catch::Contains("needs the token ids"));
}

TEST_CASE("a tied subspace model: the head is the frozen token table plus the k-wide embedding, a copy [vocab, k] cut apart") {
  for (const bool llama : {false, true}) {
    CAPTURE(llama);
    GptConfig g = tiny();
    g.tieEmbeddings = true;
    LlamaConfig l = tinyLlama();
    l.tieEmbeddings = true;
    const auto make = [&](int first, int last) { return llama ? makeLlamaStage(l, first, last, 5) : makeGptStage(g, first, last, 5); };
    const auto count = [&](int first, int last) {
      return llama ? llamaParameterCount(l, first, last) : gptParameterCount(g, first, last);
    };
    torch::manual_seed(4);
    const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
    const at::Tensor gradLogits = torch::randn({2, 12, 50});
    auto full = make(0, 4);
    auto a = make(0, 1), b = make(1, 3), z = make(3, 4);
    const auto last = byName(z->stateDict()), first = byName(a->stateDict());
    CHECK(last.at("head.weight").sizes() == c10::IntArrayRef({50, kRank}));  // k wide: the tied exchange is too
    CHECK(torch::equal(last.at("head.weight"), first.at("tok_emb.weight")));  // the copy starts equal
    CHECK_FALSE(byName(full->stateDict()).count("head.weight"));  // one stage: the embedding itself
    const at::Tensor expected = full->forward(0, ids);
    b->setTokens(ids);
    z->setTokens(ids);
    CHECK(torch::equal(z->forward(0, b->forward(0, a->forward(0, ids))), expected));
    // The copies' gradients add up to the one matrix's.
    full->backward(0, gradLogits);
    a->backward(0, b->backward(0, z->backward(0, gradLogits)));
    const at::Tensor summed = byName(a->namedParameters()).at("tok_emb.weight").grad() +
                              byName(z->namedParameters()).at("head.weight").grad();
    CHECK(torch::allclose(summed, byName(full->namedParameters()).at("tok_emb.weight").grad(), 1e-5, 1e-7));
    int64_t trained = 0;
    for (const auto& p : z->parameters()) trained += p.numel();
    const int64_t frame = 50 * 32 + (llama ? 0 : 12 * 32) + 32 * kRank;
    CHECK(trained + frame == count(3, 4));
    CHECK(count(0, 4) + 2 * frame + 50 * kRank == count(0, 1) + count(1, 3) + count(3, 4));
  }
}

TEST_CASE("block recompute of a subspace model trains bit for bit as keeping the activations does") {
  // GPT with dropout (the replay draws what the first run drew) and LLaMA; a first stage
  // (token ids in) and a middle one (coefficients and ids in), two micro-batches in flight.
  for (const bool llama : {false, true}) {
    for (const int first : {0, 1}) {
      INFO((llama ? "llama" : "gpt") << ", first block " << first);
      auto make = [&](bool recompute) {
        if (llama) {
          LlamaConfig c = tinyLlama();
          c.recompute = recompute;
          return makeLlamaStage(c, first, first + 2, 7);
        }
        GptConfig c = tiny();
        c.dropout = 0.1, c.recompute = recompute;
        return makeGptStage(c, first, first + 2, 7);
      };
      auto kept = make(false), replayed = make(true);
      torch::manual_seed(3);
      const at::Tensor ids0 = torch::randint(0, 50, {2, 12}), ids1 = torch::randint(0, 50, {2, 12});
      const at::Tensor x0 = first == 0 ? ids0 : torch::randn({2, 12, kRank}, torch::requires_grad());
      const at::Tensor x1 = first == 0 ? ids1 : torch::randn({2, 12, kRank}, torch::requires_grad());
      const at::Tensor g = torch::randn({2, 12, kRank});
      std::vector<at::Tensor> outs[2], grads[2];
      int k = 0;
      for (Stage* s : {kept.get(), replayed.get()}) {
        torch::manual_seed(11);
        s->setTokens(ids0);
        outs[k].push_back(s->forward(0, x0));
        s->setTokens(ids1);
        outs[k].push_back(s->forward(1, x1));
        torch::manual_seed(12);
        grads[k].push_back(s->backward(1, g));
        grads[k].push_back(s->backward(0, g * 2));
        ++k;
      }
      for (size_t i = 0; i < outs[0].size(); ++i) CHECK(torch::equal(outs[0][i], outs[1][i]));
      for (size_t i = 0; i < grads[0].size(); ++i) {
        CHECK(grads[0][i].defined() == grads[1][i].defined());
        if (grads[0][i].defined()) CHECK(torch::equal(grads[0][i], grads[1][i]));
      }
      const auto expected = byName(kept->namedParameters());
      for (const auto& [name, p] : replayed->namedParameters()) {
        INFO(name);
        REQUIRE(p.grad().defined());
        CHECK(torch::equal(p.grad(), expected.at(name).grad()));
      }
    }
  }
}

TEST_CASE("the drawn frame is the same bits on every machine: integer draws and an fma Gram-Schmidt") {
  // These hashes were computed on an x86-64 VM (AVX2, OpenBLAS); another CPU, BLAS or
  // compiler must give the same bits, or stages on different hardware would disagree.
  const auto state = byName(makeGptStage(tiny(), 0, 4, 7)->stateDict());
  const auto hashOf = [](const at::Tensor& t) {
    const at::Tensor c = t.contiguous();
    return XXH64(c.data_ptr(), c.numel() * c.element_size(), 0);
  };
  CHECK(hashOf(state.at("subspace.tokens")) == 5515308406206477070ull);
  CHECK(hashOf(state.at("subspace.positions")) == 3552692701956319069ull);
  CHECK(hashOf(state.at("subspace.basis")) == 10228103447047861033ull);
  const at::Tensor tokens = state.at("subspace.tokens");
  CHECK(std::abs(tokens.mean().item<double>()) < 0.002);
  CHECK(std::abs(tokens.std().item<double>() - 0.02) < 0.002);
  CHECK(tokens.abs().max().item<double>() <= 0.02 * std::sqrt(12.0));
}
