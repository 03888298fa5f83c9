// The small subspace models the subspace tests share (tests/stages/subspace_*_test.cpp).
#pragma once

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "stages/models/gpt.h"
#include "stages/models/llama.h"
#include "stages/weights/weights.h"

namespace skytrain::testing {

constexpr int kRank = 4;

// A 4-block GPT, d_model 32, vocabulary 50, as a subspace model of rank kRank.
inline stages::GptConfig tiny() {
  stages::GptConfig c;
  c.vocabSize = 50;
  c.dModel = 32;
  c.heads = 4;
  c.layers = 4;
  c.dFf = 64;
  c.seqLen = 12;
  c.subspaceRank = kRank;
  return c;
}

// The same for LLaMA (grouped key/value heads).
inline stages::LlamaConfig tinyLlama() {
  stages::LlamaConfig c;
  c.vocabSize = 50;
  c.dModel = 32;
  c.heads = 4;
  c.kvHeads = 2;
  c.layers = 4;
  c.dFf = 48;
  c.seqLen = 12;
  c.subspaceRank = kRank;
  return c;
}

inline std::map<std::string, at::Tensor> byName(const stages::NamedTensors& tensors) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, tensor] : tensors) out[name] = tensor;
  return out;
}

// A lookup over tensors by name, as initialiseFrom gets one from a file (undefined: absent).
inline stages::TensorLookup lookupIn(std::map<std::string, at::Tensor> tensors) {
  return [tensors = std::move(tensors)](const std::string& name) {
    const auto it = tensors.find(name);
    return it == tensors.end() ? at::Tensor() : it->second;
  };
}

// A model's stages [0,1) [1,3) [3,4) against the whole model (`make(first, last)` builds each
// from the same seed): every tensor of each stage's state is the whole model's (frozen frames
// included), the logits are the same bits, a k-wide tensor (`rank`) crosses each cut each way,
// and each parameter's gradient matches. Returns the whole model.
template <typename Make>
std::unique_ptr<stages::Stage> checkComposesInThree(const Make& make, int64_t rank) {
  torch::manual_seed(0);
  const at::Tensor ids = torch::randint(0, 50, {3, 12}, torch::kLong);
  const at::Tensor gradLogits = torch::randn({3, 12, 50});
  auto full = make(0, 4);
  auto a = make(0, 1), b = make(1, 3), c = make(3, 4);
  const auto reference = byName(full->stateDict());
  size_t held = 0;
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, tensor] : part->stateDict()) {
      INFO(name);
      REQUIRE(reference.count(name));
      CHECK(torch::equal(reference.at(name), tensor));
      held += name.rfind("subspace.", 0) == 0 ? 0 : 1;  // a shared frame stands in every stage
    }
  }
  size_t own = 0;
  for (const auto& [name, tensor] : reference) own += name.rfind("subspace.", 0) == 0 ? 0 : 1;
  CHECK(held == own);  // everything else is in exactly one stage

  const at::Tensor expected = full->forward(0, ids);
  const at::Tensor first = a->forward(0, ids);
  CHECK(first.sizes() == c10::IntArrayRef({3, 12, rank}));
  b->setTokens(ids);
  const at::Tensor second = b->forward(0, first);
  CHECK(second.sizes() == c10::IntArrayRef({3, 12, rank}));
  c->setTokens(ids);
  CHECK(torch::equal(c->forward(0, second), expected));  // each stage rebuilds h as the whole model does

  full->backward(0, gradLogits);
  const at::Tensor gradSecond = c->backward(0, gradLogits);
  CHECK(gradSecond.sizes() == c10::IntArrayRef({3, 12, rank}));
  const at::Tensor gradFirst = b->backward(0, gradSecond);
  CHECK(gradFirst.sizes() == c10::IntArrayRef({3, 12, rank}));
  CHECK_FALSE(a->backward(0, gradFirst).defined());
  const auto fullParams = byName(full->namedParameters());
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, p] : part->namedParameters()) {
      INFO(name);
      REQUIRE(p.grad().defined());
      CHECK(torch::allclose(p.grad(), fullParams.at(name).grad(), 1e-5, 1e-7));
    }
  }
  return full;
}

}  // namespace skytrain::testing
