#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <map>

#include "scheduler/error.h"
#include "stages/models/llama.h"

using namespace skytrain::stages;

namespace {

LlamaConfig tiny(bool tied = false) {
  LlamaConfig c;
  c.vocabSize = 50;
  c.dModel = 32;
  c.heads = 4;
  c.kvHeads = 2;
  c.layers = 4;
  c.dFf = 48;
  c.seqLen = 12;
  c.tieEmbeddings = tied;
  return c;
}

std::map<std::string, at::Tensor> byName(const Stage& stage) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, tensor] : stage.stateDict()) out[name] = tensor;
  return out;
}

at::Tensor chain(const std::vector<Stage*>& stages, const at::Tensor& ids) {
  at::Tensor x = ids;
  for (auto* stage : stages) x = stage->infer(x);
  return x;
}

}  // namespace

TEST_CASE("a llama cut in three has the whole model's weights and computes its logits") {
  const bool tied = GENERATE(false, true);
  CAPTURE(tied);
  auto full = makeLlamaStage(tiny(tied), 0, 4, 7);
  auto a = makeLlamaStage(tiny(tied), 0, 1, 7);
  auto b = makeLlamaStage(tiny(tied), 1, 3, 7);
  auto c = makeLlamaStage(tiny(tied), 3, 4, 7);
  const auto reference = byName(*full);
  size_t seen = 0;
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, tensor] : byName(*part)) {
      INFO(name);
      if (tied && name == "head.weight") {  // the last stage's copy of the tied matrix
        CHECK(torch::equal(reference.at("tok_emb.weight"), tensor));
        continue;
      }
      REQUIRE(reference.count(name));
      CHECK(torch::equal(reference.at(name), tensor));
      ++seen;
    }
  }
  CHECK(seen == reference.size());
  CHECK(reference.count("head.weight") == (tied ? 0 : 1));
  int64_t counted = 0;
  for (const auto& p : full->parameters()) counted += p.numel();
  CHECK(counted == llamaParameterCount(tiny(tied), 0, 4));
  const int64_t split = llamaParameterCount(tiny(tied), 0, 1) + llamaParameterCount(tiny(tied), 1, 3) +
                        llamaParameterCount(tiny(tied), 3, 4);
  CHECK(split == counted + (tied ? 50 * 32 : 0));  // the tied copy counts on both ends

  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  const at::Tensor whole = full->infer(ids);
  CHECK(whole.sizes().vec() == std::vector<int64_t>{2, 12, 50});
  CHECK(torch::allclose(chain({a.get(), b.get(), c.get()}, ids), whole, 1e-5, 1e-6));
  CHECK(llamaInputShape(tiny(), 1, 3) == std::vector<int64_t>{3, 12, 32});
}

TEST_CASE("llama attention is causal: a later token changes no earlier logit") {
  auto model = makeLlamaStage(tiny(), 0, 4, 3);
  at::Tensor ids = torch::randint(0, 50, {1, 12}, torch::kLong);
  const at::Tensor before = model->infer(ids);
  ids.index_put_({0, 8}, (ids.index({0, 8}) + 1) % 50);
  const at::Tensor after = model->infer(ids);
  CHECK(torch::equal(before.narrow(1, 0, 8), after.narrow(1, 0, 8)));
  CHECK_FALSE(torch::equal(before.narrow(1, 8, 4), after.narrow(1, 8, 4)));
}

TEST_CASE("a llama stage trains: its backward reaches every parameter") {
  auto model = makeLlamaStage(tiny(true), 0, 4, 3);
  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  // The runner's hand-off: the loss on the stage's output as a leaf, its gradient back in.
  const at::Tensor out = model->forward(0, ids).requires_grad_(true);
  model->loss(out, torch::randint(0, 50, {2, 12}, torch::kLong)).backward();
  model->backward(0, out.grad());
  for (const auto& [name, p] : model->namedParameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().abs().sum().item<double>() > 0);
  }
}

TEST_CASE("bad llama sizes are refused with the reason") {
  LlamaConfig c = tiny();
  c.kvHeads = 3;
  CHECK_THROWS_WITH(makeLlamaStage(c, 0, 4, 1), Catch::Contains("not a multiple of kv_heads 3"));
  c = tiny();
  c.heads = 32;  // head width 1: rotary embeddings rotate pairs
  c.kvHeads = 32;
  CHECK_THROWS_WITH(makeLlamaStage(c, 0, 4, 1), Catch::Contains("even head width"));
  CHECK_THROWS_WITH(makeLlamaStage(tiny(), 2, 2, 1), Catch::Contains("layer range [2, 2)"));
  CHECK_THROWS_WITH(makeLlamaStage(tiny(), 0, 4, 1)->infer(torch::zeros({1, 13}, torch::kLong)),
                    Catch::Contains("sequence length 13"));
}

TEST_CASE("llama block recompute trains bit for bit as keeping the activations does") {
  LlamaConfig c = tiny();
  LlamaConfig r = c;
  r.recompute = true;
  auto kept = makeLlamaStage(c, 0, c.layers, 5);
  auto replayed = makeLlamaStage(r, 0, c.layers, 5);
  torch::manual_seed(2);
  const at::Tensor ids = torch::randint(0, c.vocabSize, {2, 12}, torch::kLong);
  const at::Tensor targets = torch::randint(0, c.vocabSize, {2, 12}, torch::kLong);
  for (Stage* s : {kept.get(), replayed.get()}) {
    const at::Tensor out = s->forward(0, ids).requires_grad_(true);
    s->loss(out, targets).backward();
    s->backward(0, out.grad());
  }
  std::map<std::string, at::Tensor> expected;
  for (const auto& [name, p] : kept->namedParameters()) expected[name] = p;
  for (const auto& [name, p] : replayed->namedParameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(torch::equal(p.grad(), expected.at(name).grad()));
  }
  CHECK(llamaStashBytesPerSample(r, 0, c.layers) < llamaStashBytesPerSample(c, 0, c.layers));
}
