// The small subspace models the subspace tests share (tests/stages/subspace_*_test.cpp).
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

#include "stages/models/gpt.h"
#include "stages/models/llama.h"

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

}  // namespace skytrain::testing
