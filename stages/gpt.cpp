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
  CausalSelfAttention(const GptConfig& c) : heads(c.heads), dropout(c.dropout), causal(c.causal) {
    qkv = register_module("qkv", nn::Linear(c.dModel, 3 * c.dModel));
    proj = register_module("proj", nn::Linear(c.dModel, c.dModel));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    const auto b = x.size(0), t = x.size(1), d = x.size(2);
    auto parts = qkv->forward(x).view({b, t, 3, heads, d / heads}).permute({2, 0, 3, 1, 4});
    auto q = parts[0], k = parts[1], v = parts[2];  // [b, h, t, dh]
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d / heads));
    if (causal) {
      auto mask = torch::ones({t, t}, torch::kBool).triu(1);
      scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
    }
    auto attention = torch::dropout(torch::softmax(scores, -1), dropout, is_training());
    auto y = torch::matmul(attention, v).transpose(1, 2).reshape({b, t, d});
    return torch::dropout(proj->forward(y), dropout, is_training());
  }

  int64_t heads;
  double dropout;
  bool causal;
  nn::Linear qkv{nullptr}, proj{nullptr};
};

// A transformer block, whole or (with a split point) in part.
struct BlockBase : nn::Module {
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

struct Block : BlockBase {
  explicit Block(const GptConfig& c) : dropout(c.dropout) {
    ln1 = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
    attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
    ln2 = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
    fc = register_module("fc", nn::Linear(c.dModel, c.dFf));
    proj = register_module("proj", nn::Linear(c.dFf, c.dModel));
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = x + attn->forward(ln1->forward(x));
    auto h = proj->forward(torch::gelu(fc->forward(ln2->forward(x))));
    return x + torch::dropout(h, dropout, is_training());
  }

  double dropout;
  nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  std::shared_ptr<CausalSelfAttention> attn;
  nn::Linear fc{nullptr}, proj{nullptr};
};

// The block of a split point: the factored layer's W = U S V, with the front half (the
// attention sublayer, ln2, [fc, gelu,] V) and/or the back half (S, U[, gelu, proj]).
// Parameter names match whichever halves a stage holds: fc_v, fc_s, fc_u (or proj_*).
struct FactoredBlock : BlockBase {
  FactoredBlock(const GptConfig& c, bool front, bool back)
      : split(c.split), front(front), back(back), dModel(c.dModel), dropout(c.dropout) {
    const bool fcSplit = split.layer == SplitPoint::Layer::Fc;
    const int in = fcSplit ? c.dModel : c.dFf, out = fcSplit ? c.dFf : c.dModel, r = split.rank;
    const std::string name = fcSplit ? "fc" : "proj";
    if (front) {
      ln1 = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
      attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
      ln2 = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
      if (!fcSplit) fc = register_module("fc", nn::Linear(c.dModel, c.dFf));
      v = register_module(name + "_v", nn::Linear(nn::LinearOptions(in, r).bias(false)));
    }
    if (back) {
      s = register_module(name + "_s", nn::Linear(nn::LinearOptions(r, r).bias(false)));
      u = register_module(name + "_u", nn::Linear(r, out));
      if (fcSplit) proj = register_module("proj", nn::Linear(c.dFf, c.dModel));
    }
  }

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor residual;
    if (front) {
      x = x + attn->forward(ln1->forward(x));
      residual = x;
      auto h = ln2->forward(x);
      if (fc) h = torch::gelu(fc->forward(h));
      x = v->forward(h);
      if (!back) return split.keepResidual ? torch::cat({x, residual}, -1) : x;
    } else if (split.keepResidual) {
      residual = x.narrow(-1, split.rank, dModel);
      x = x.narrow(-1, 0, split.rank);
    }
    auto h = u->forward(s->forward(x));
    if (proj) h = proj->forward(torch::gelu(h));
    h = torch::dropout(h, dropout, is_training());
    return split.keepResidual ? residual + h : h;
  }

  // Sets V, S, U from the SVD of the unfactored weight W (out x in) and its bias, with
  // each singular vector's sign fixed (largest entry of U's column positive) so that two
  // stages factoring the same W agree on their halves.
  void factor(const torch::Tensor& w, const torch::Tensor& bias) {
    torch::NoGradGuard noGrad;
    auto [uFull, sFull, vh] = torch::linalg_svd(w, /*full_matrices=*/false);
    const int64_t r = split.rank;
    auto uR = uFull.narrow(1, 0, r).clone();
    auto vR = vh.narrow(0, 0, r).clone();
    const auto pivots = uR.abs().argmax(0);
    const auto signs = uR.gather(0, pivots.unsqueeze(0)).sign().squeeze(0);
    uR *= signs;
    vR *= signs.unsqueeze(1);
    if (v) v->weight.copy_(vR);
    if (s) s->weight.copy_(torch::diag(sFull.narrow(0, 0, r)));
    if (u) {
      u->weight.copy_(uR);
      u->bias.copy_(bias);
    }
  }

  SplitPoint split;
  bool front, back;
  int64_t dModel;
  double dropout;
  nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  std::shared_ptr<CausalSelfAttention> attn;
  nn::Linear fc{nullptr}, proj{nullptr}, v{nullptr}, s{nullptr}, u{nullptr};
};

// Blocks [first, last) plus the embeddings and/or head when the range touches an end.
struct GptSlice : nn::Module {
  GptSlice(const GptConfig& c, int first, int last) : dropout(c.dropout) {
    if (first == 0) {
      tok = register_module("tok_emb", nn::Embedding(c.vocabSize, c.dModel));
      pos = register_parameter("pos_emb", torch::zeros({c.seqLen, c.dModel}));
    }
    const int k = c.split.block;
    // The back half of the split block stays with its front unless the front ends a stage
    // that another stage follows.
    const bool backLeaves = c.split.enabled() && k == last - 1 && last < c.layers;
    if (c.split.enabled() && k == first - 1) addBlock(k, std::make_shared<FactoredBlock>(c, false, true));
    for (int i = first; i < last; ++i) {
      if (c.split.enabled() && i == k) {
        addBlock(i, std::make_shared<FactoredBlock>(c, true, !backLeaves));
      } else {
        addBlock(i, std::make_shared<Block>(c));
      }
    }
    if (last == c.layers) {
      lnF = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
      head = register_module(c.headName, nn::Linear(nn::LinearOptions(c.dModel, c.outputs > 0 ? c.outputs : c.vocabSize)
                                                    .bias(c.outputs > 0)));
    }
  }

  void addBlock(int index, std::shared_ptr<BlockBase> block) {
    blocks.push_back(register_module("block" + std::to_string(index), block));
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
  std::vector<std::shared_ptr<BlockBase>> blocks;
  nn::LayerNorm lnF{nullptr};
  nn::Linear head{nullptr};
};

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

at::Tensor drawWeight(const std::string& name, const std::vector<int64_t>& shape, double std, uint64_t seed) {
  const uint64_t tensorSeed = XXH64(name.data(), name.size(), seed);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(tensorSeed);
  return torch::empty(shape).normal_(0.0, std, generator);
}

// GPT-2 initialisation, each tensor drawn from its own generator seeded by (seed, name).
// A split point's factors come from the SVD of the weight the unfactored layer would draw.
void initialise(GptSlice& slice, const GptConfig& c, uint64_t seed) {
  torch::NoGradGuard noGrad;
  const double residualStd = 0.02 / std::sqrt(2.0 * c.layers);
  for (auto& item : slice.named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    if (name.find(".ln") != std::string::npos || name.rfind("ln_f", 0) == 0) {
      endsWith(name, "weight") ? p.fill_(1.0) : p.zero_();
    } else if (endsWith(name, "bias")) {
      p.zero_();
    } else {
      p.copy_(drawWeight(name, p.sizes().vec(), endsWith(name, "proj.weight") ? residualStd : 0.02, seed));
    }
  }
  if (!c.split.enabled()) return;
  const bool fcSplit = c.split.layer == SplitPoint::Layer::Fc;
  const std::string layer = "block" + std::to_string(c.split.block) + (fcSplit ? ".fc.weight" : ".proj.weight");
  const std::vector<int64_t> shape = fcSplit ? std::vector<int64_t>{c.dFf, c.dModel} : std::vector<int64_t>{c.dModel, c.dFf};
  const at::Tensor w = drawWeight(layer, shape, fcSplit ? 0.02 : residualStd, seed);
  for (auto& block : slice.blocks) {
    if (auto factored = std::dynamic_pointer_cast<FactoredBlock>(block)) factored->factor(w, torch::zeros({shape[0]}));
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
  if (c.split.enabled()) {
    const int maxRank = std::min(c.dModel, c.dFf);
    if (c.split.block >= c.layers) {
      throw Error("gpt: split point block " + std::to_string(c.split.block) + " is not below layers " +
                  std::to_string(c.layers));
    }
    if (c.split.rank < 1 || c.split.rank > maxRank) {
      throw Error("gpt: split point rank " + std::to_string(c.split.rank) + " is not in [1, " +
                  std::to_string(maxRank) + "]");
    }
  }
}

}  // namespace

std::unique_ptr<Stage> makeGptStage(const GptConfig& config, int firstLayer, int lastLayer, uint64_t seed,
                                    std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss) {
  validate(config, firstLayer, lastLayer);
  auto slice = std::make_shared<GptSlice>(config, firstLayer, lastLayer);
  initialise(*slice, config, seed);
  return std::make_unique<ModuleStage>(slice, [slice](const at::Tensor& x) { return slice->forward(x); }, std::move(loss));
}

std::vector<int64_t> gptInputShape(const GptConfig& c, int firstLayer, int64_t samples) {
  if (firstLayer == 0) return {samples, c.seqLen};
  int64_t width = c.dModel;
  if (c.split.enabled() && c.split.block == firstLayer - 1) width = c.split.rank + (c.split.keepResidual ? c.dModel : 0);
  return {samples, c.seqLen, width};
}

double gptStashBytesPerSample(const GptConfig& c, int firstLayer, int lastLayer) {
  const double t = c.seqLen;
  double floats = (lastLayer - firstLayer) * t * (16.0 * c.dModel + 3.0 * c.dFf + 2.0 * c.heads * t);
  if (lastLayer == c.layers) floats += 2.0 * t * (c.outputs > 0 ? c.outputs : c.vocabSize);
  return 4.0 * floats;
}

int64_t gptParameterCount(const GptConfig& c, int firstLayer, int lastLayer) {
  validate(c, firstLayer, lastLayer);
  const int64_t d = c.dModel, ff = c.dFf;
  const int64_t block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d);
  int64_t count = block * (lastLayer - firstLayer);
  if (firstLayer == 0) count += c.vocabSize * d + c.seqLen * d;
  if (lastLayer == c.layers) count += 2 * d + (c.outputs > 0 ? (d + 1) * c.outputs : d * c.vocabSize);
  return count;
}

}  // namespace skytrain::stages
