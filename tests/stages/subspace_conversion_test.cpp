// A pretrained, unconstrained model converted into the subspace form for fine-tuning
// (detail::adoptPretrained): the same model at k = d_model, one frame in every stage, the
// tied head, and crafted files refused naming the tensor.
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
using skytrain::testing::kRank;
using skytrain::testing::tiny;
using skytrain::testing::tinyLlama;

namespace {

// A lookup over a stage's own tensors, as initialiseFrom gets one from a file.
TensorLookup lookupOf(const Stage& stage) { return skytrain::testing::lookupIn(byName(stage.stateDict())); }

}  // namespace

TEST_CASE("a pretrained GPT converts into the subspace form: the same model at k = d_model, one frame in every stage") {
  GptConfig plain = tiny();
  plain.subspaceRank = 0;
  auto pretrained = makeGptStage(plain, 0, 4, 3);
  const TensorLookup file = lookupOf(*pretrained);
  torch::manual_seed(2);
  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  const at::Tensor expected = pretrained->forward(0, ids);

  // k = d_model: U spans everything, so the converted model is the pretrained one.
  GptConfig whole = tiny();
  whole.subspaceRank = 32;
  auto converted = makeGptStage(whole, 0, 4, 9);
  const InitResult loaded = initialiseFrom(*converted, file, "pretrained");
  CHECK(loaded.fromSeed.empty());
  CHECK(torch::allclose(converted->forward(0, ids), expected, 1e-4, 1e-5));

  // k < d_model, cut in three: every stage derives the same frame, and the cuts compose.
  auto full = makeGptStage(tiny(), 0, 4, 9);
  auto a = makeGptStage(tiny(), 0, 1, 9), b = makeGptStage(tiny(), 1, 3, 9), c = makeGptStage(tiny(), 3, 4, 9);
  for (auto* stage : {full.get(), a.get(), b.get(), c.get()}) initialiseFrom(*stage, file, "pretrained");
  const auto reference = byName(full->stateDict());
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, tensor] : part->stateDict()) {
      INFO(name);
      CHECK(torch::equal(reference.at(name), tensor));
    }
  }
  b->setTokens(ids);
  c->setTokens(ids);
  CHECK(torch::equal(c->forward(0, b->forward(0, a->forward(0, ids))), full->forward(0, ids)));

  // What the conversion made: U orthonormal and seed-independent (another seed, the same U),
  // h starts as the pretrained embedding, each output projection is UᵀW.
  const at::Tensor basis = reference.at("subspace.basis");
  CHECK(torch::allclose(basis.t().matmul(basis), torch::eye(kRank), 1e-5, 1e-6));
  auto again = makeGptStage(tiny(), 0, 4, 10);
  initialiseFrom(*again, file, "pretrained");
  CHECK(torch::equal(byName(again->stateDict()).at("subspace.basis"), basis));
  const auto source = byName(pretrained->stateDict());
  const at::Tensor h0 = reference.at("subspace.tokens") + reference.at("tok_emb.weight").matmul(basis.t());
  CHECK(torch::allclose(h0, source.at("tok_emb.weight"), 1e-5, 1e-6));
  const at::Tensor p0 = reference.at("subspace.positions") + reference.at("pos_emb").matmul(basis.t());
  CHECK(torch::allclose(p0, source.at("pos_emb"), 1e-5, 1e-6));
  CHECK(torch::allclose(reference.at("block2.proj.weight"), basis.t().matmul(source.at("block2.proj.weight")), 1e-5, 1e-6));
  CHECK(torch::allclose(reference.at("block1.attn.proj.bias"), basis.t().matmul(source.at("block1.attn.proj.bias")), 1e-5, 1e-6));
  // U holds the writers' strongest directions: more of their energy than a drawn basis holds.
  std::vector<at::Tensor> parts;
  for (int i = 0; i < 4; ++i) {
    for (const char* w : {".attn.proj.weight", ".proj.weight"}) parts.push_back(source.at("block" + std::to_string(i) + w));
  }
  const at::Tensor writers = torch::cat(parts, 1);
  const at::Tensor drawn = byName(makeGptStage(tiny(), 0, 1, 9)->stateDict()).at("subspace.basis");
  CHECK(basis.t().matmul(writers).norm().item<double>() > drawn.t().matmul(writers).norm().item<double>());

  // A subspace model's own file loads by name, frame included (no conversion).
  auto reloaded = makeGptStage(tiny(), 0, 4, 11);
  initialiseFrom(*reloaded, lookupOf(*full), "subspace export");
  for (const auto& [name, tensor] : reloaded->stateDict()) CHECK(torch::equal(reference.at(name), tensor));

  // A file without every block's output projection is refused, naming it (a stage converts
  // with all of them, not only its own).
  const TensorLookup partial = [&](const std::string& name) {
    return name.rfind("block3.", 0) == 0 ? at::Tensor() : file(name);
  };
  auto first = makeGptStage(tiny(), 0, 1, 9);
  CHECK_THROWS_WITH(initialiseFrom(*first, partial, "part"), Catch::Contains("block3.attn.proj.weight: not in the file"));
  // Crafted files: each refused naming the tensor, as a skytrain::Error (no stage is built).
  const auto crafted = [&](const std::string& target, const at::Tensor& value) {
    return TensorLookup([&, target, value](const std::string& name) { return name == target ? value : file(name); });
  };
  const auto refusal = [&](const TensorLookup& lookup) {
    auto stage = makeGptStage(tiny(), 1, 3, 9);
    try {
      initialiseFrom(*stage, lookup, "crafted");
    } catch (const skytrain::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const at::Tensor poisoned = source.at("block0.proj.weight").clone().index_put_({0, 0}, NAN);
  CHECK_THAT(refusal(crafted("block0.proj.weight", poisoned)), Catch::Contains("block0.proj.weight: the file's holds a NaN"));
  CHECK_THAT(refusal(crafted("block0.proj.weight", torch::zeros({31, 64}))),
             Catch::Contains("block0.proj.weight: the file's is [31, 64], expected [32, n]"));
  CHECK_THAT(refusal(crafted("block1.proj.weight", torch::zeros({32, 63}))),  // the stage's own: its width too
             Catch::Contains("block1.proj.weight: the file's is [32, 63], expected [32, 64]"));
  CHECK_THAT(refusal(crafted("block2.attn.proj.bias", torch::zeros({33}))), Catch::Contains("block2.attn.proj.bias"));
  CHECK_THAT(refusal(crafted("tok_emb.weight", torch::full({50, 32}, INFINITY))),
             Catch::Contains("tok_emb.weight: the file's holds a NaN or an infinity"));
  CHECK_THAT(refusal(crafted("block3.proj.weight", torch::full({32, 64}, 1e200, torch::kDouble))),
             Catch::Contains("overflows float64"));

  // A tied pretrained model into a tied subspace model, cut in two: at k = d_model its logits,
  // and the last stage's copy [vocab, k] equals the first stage's embedding.
  GptConfig tiedPlain = plain, tiedWhole = whole;
  tiedPlain.tieEmbeddings = tiedWhole.tieEmbeddings = true;
  auto tiedPretrained = makeGptStage(tiedPlain, 0, 4, 3);
  auto front = makeGptStage(tiedWhole, 0, 2, 9), back = makeGptStage(tiedWhole, 2, 4, 9);
  initialiseFrom(*front, lookupOf(*tiedPretrained), "tied");
  initialiseFrom(*back, lookupOf(*tiedPretrained), "tied");
  back->setTokens(ids);
  CHECK(torch::allclose(back->forward(0, front->forward(0, ids)), tiedPretrained->forward(0, ids), 1e-4, 1e-5));
  CHECK(torch::equal(byName(back->stateDict()).at("head.weight"), byName(front->stateDict()).at("tok_emb.weight")));
  // An untied file into a tied subspace model would lose its head: refused.
  auto tiedBack = makeGptStage(tiedWhole, 2, 4, 9);
  CHECK_THROWS_WITH(initialiseFrom(*tiedBack, file, "untied"), Catch::Contains("the file's head is not its embedding"));
}

TEST_CASE("a pretrained LLaMA converts into the subspace form: o and down write into U") {
  LlamaConfig c = tinyLlama();
  c.layers = 2;
  c.subspaceRank = 0;
  auto pretrained = makeLlamaStage(c, 0, 2, 4);
  torch::manual_seed(3);
  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  c.subspaceRank = 32;
  auto whole = makeLlamaStage(c, 0, 2, 6);
  initialiseFrom(*whole, lookupOf(*pretrained), "pretrained");
  CHECK(torch::allclose(whole->forward(0, ids), pretrained->forward(0, ids), 1e-4, 1e-5));
  c.subspaceRank = kRank;
  auto first = makeLlamaStage(c, 0, 1, 6), second = makeLlamaStage(c, 1, 2, 6);
  initialiseFrom(*first, lookupOf(*pretrained), "pretrained");
  initialiseFrom(*second, lookupOf(*pretrained), "pretrained");
  const auto a = byName(first->stateDict()), b = byName(second->stateDict());
  CHECK(torch::equal(a.at("subspace.basis"), b.at("subspace.basis")));
  CHECK(torch::equal(a.at("subspace.tokens"), b.at("subspace.tokens")));
  CHECK(b.at("block1.mlp.down.weight").sizes() == c10::IntArrayRef({kRank, 48}));
}
