#include "stages/gpt.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>
#include <xxhash.h>

#include <cmath>

#include "scheduler/error.h"
#include "stages/module_stage.h"

namespace skytrain::stages {
namespace {

namespace nn = torch::nn;

struct CausalSelfAttention : nn::Module {
  CausalSelfAttention(const GptConfig& c) : heads(c.heads), dropout(c.dropout) {
    qkv = register_module("qkv", nn::Linear(c.dModel, 3 * c.dModel));
    proj = register_module("proj", nn::Linear(c.dModel, c.dModel));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    const auto b = x.size(0), t = x.size(1), d = x.size(2);
    auto parts = qkv->forward(x).view({b, t, 3, heads, d / heads}).permute({2, 0, 3, 1, 4});
    auto q = parts[0], k = parts[1], v = parts[2];  // [b, h, t, dh]
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d / heads));
    auto mask = torch::ones({t, t}, torch::kBool).triu(1);
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
    auto attention = torch::dropout(torch::softmax(scores, -1), dropout, is_training());
    auto y = torch::matmul(attention, v).transpose(1, 2).reshape({b, t, d});
    return torch::dropout(proj->forward(y), dropout, is_training());
  }

  int64_t heads;
  double dropout;
  nn::Linear qkv{nullptr}, proj{nullptr};
};

struct Block : nn::Module {
  explicit Block(const GptConfig& c) : dropout(c.dropout) {
    ln1 = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
    attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
    ln2 = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
    fc = register_module("fc", nn::Linear(c.dModel, c.dFf));
    proj = register_module("proj", nn::Linear(c.dFf, c.dModel));
  }

  torch::Tensor forward(torch::Tensor x) {
    x = x + attn->forward(ln1->forward(x));
    auto h = proj->forward(torch::gelu(fc->forward(ln2->forward(x))));
    return x + torch::dropout(h, dropout, is_training());
  }

  double dropout;
  nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  std::shared_ptr<CausalSelfAttention> attn;
  nn::Linear fc{nullptr}, proj{nullptr};
};

// Blocks [first, last) plus the embeddings and/or head when the range touches an end.
struct GptSlice : nn::Module {
  GptSlice(const GptConfig& c, int first, int last) : dropout(c.dropout) {
    if (first == 0) {
      tok = register_module("tok_emb", nn::Embedding(c.vocabSize, c.dModel));
      pos = register_parameter("pos_emb", torch::zeros({c.seqLen, c.dModel}));
    }
    for (int i = first; i < last; ++i) {
      blocks.push_back(register_module("block" + std::to_string(i), std::make_shared<Block>(c)));
    }
    if (last == c.layers) {
      lnF = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
      head = register_module("head", nn::Linear(nn::LinearOptions(c.dModel, c.vocabSize).bias(false)));
    }
  }

  torch::Tensor forward(const torch::Tensor& input) {
    torch::Tensor x = input;
    if (tok) {
      if (input.scalar_type() != torch::kLong || input.dim() != 2) {
        throw Error("first stage expects int64 token ids [batch, seq], got " +
                    std::string(c10::toString(input.scalar_type())) + " " + c10::str(input.sizes()));
      }
      if (input.size(1) > pos.size(0)) {
        throw Error("sequence length " + std::to_string(input.size(1)) + " exceeds the model's " +
                    std::to_string(pos.size(0)));
      }
      x = torch::dropout(tok->forward(input) + pos.slice(0, 0, input.size(1)), dropout, is_training());
    }
    for (auto& block : blocks) x = block->forward(x);
    if (head) x = head->forward(lnF->forward(x));
    return x;
  }

  double dropout;
  nn::Embedding tok{nullptr};
  torch::Tensor pos;
  std::vector<std::shared_ptr<Block>> blocks;
  nn::LayerNorm lnF{nullptr};
  nn::Linear head{nullptr};
};

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// GPT-2 initialisation, each tensor drawn from its own generator seeded by (seed, name).
void initialise(nn::Module& module, const GptConfig& c, uint64_t seed) {
  torch::NoGradGuard noGrad;
  const double residualStd = 0.02 / std::sqrt(2.0 * c.layers);
  for (auto& item : module.named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    if (name.find(".ln") != std::string::npos || name.rfind("ln_f", 0) == 0) {
      endsWith(name, "weight") ? p.fill_(1.0) : p.zero_();
    } else if (endsWith(name, "bias")) {
      p.zero_();
    } else {
      const uint64_t tensorSeed = XXH64(name.data(), name.size(), seed);
      auto generator = at::make_generator<at::CPUGeneratorImpl>(tensorSeed);
      p.normal_(0.0, endsWith(name, "proj.weight") ? residualStd : 0.02, generator);
    }
  }
}

void validate(const GptConfig& c, int first, int last) {
  if (c.vocabSize < 1 || c.dModel < 1 || c.heads < 1 || c.layers < 1 || c.dFf < 1 || c.seqLen < 1) {
    throw Error("gpt: every size must be positive");
  }
  if (c.dModel % c.heads != 0) {
    throw Error("gpt: d_model " + std::to_string(c.dModel) + " is not divisible by heads " +
                std::to_string(c.heads));
  }
  if (first < 0 || last > c.layers || first >= last) {
    throw Error("gpt: layer range [" + std::to_string(first) + ", " + std::to_string(last) +
                ") is not a non-empty range within [0, " + std::to_string(c.layers) + ")");
  }
}

}  // namespace

std::unique_ptr<Stage> makeGptStage(const GptConfig& config, int firstLayer, int lastLayer, uint64_t seed) {
  validate(config, firstLayer, lastLayer);
  auto slice = std::make_shared<GptSlice>(config, firstLayer, lastLayer);
  initialise(*slice, config, seed);
  return std::make_unique<ModuleStage>(slice, [slice](const at::Tensor& x) { return slice->forward(x); });
}

int64_t gptParameterCount(const GptConfig& c, int firstLayer, int lastLayer) {
  validate(c, firstLayer, lastLayer);
  const int64_t d = c.dModel, ff = c.dFf;
  const int64_t block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d);
  int64_t count = block * (lastLayer - firstLayer);
  if (firstLayer == 0) count += c.vocabSize * d + c.seqLen * d;
  if (lastLayer == c.layers) count += 2 * d + d * c.vocabSize;
  return count;
}

}  // namespace skytrain::stages
