#include "stages/models/gpt_modules.h"

#include <ATen/CPUGeneratorImpl.h>
#include <xxhash.h>

#include <cmath>
#include <limits>

#include "scheduler/error.h"
#include "stages/split_backward.h"

namespace skytrain::stages::detail {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

at::Tensor drawWeight(const std::string& name, const std::vector<int64_t>& shape, double std, uint64_t seed) {
  const uint64_t tensorSeed = XXH64(name.data(), name.size(), seed);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(tensorSeed);
  return torch::empty(shape).normal_(0.0, std, generator);
}

torch::Tensor gelu(const torch::Tensor& x, bool tanh) { return tanh ? torch::gelu(x, "tanh") : torch::gelu(x); }

Attention::Attention(const GptConfig& c, bool cross, int64_t outputs)
    : heads(c.heads), dropout(c.dropout), causal(c.causal && !cross) {
  if (cross) {
    q = register_module("q", nn::Linear(c.dModel, c.dModel));
    kv = register_module("kv", nn::Linear(c.dModel, 2 * c.dModel));
  } else {
    qkv = register_module("qkv", nn::Linear(c.dModel, 3 * c.dModel));
  }
  proj = register_module("proj", nn::Linear(c.dModel, outputs > 0 ? outputs : c.dModel));
}

torch::Tensor Attention::forward(const torch::Tensor& x, const torch::Tensor& memory) {
  const auto b = x.size(0), t = x.size(1), d = x.size(2), dh = d / heads;
  torch::Tensor queries, keys, values;  // [b, h, t, dh]
  if (qkv) {
    auto parts = linear(*qkv, x).view({b, t, 3, heads, dh}).permute({2, 0, 3, 1, 4});
    queries = parts[0], keys = parts[1], values = parts[2];
  } else {
    const auto s = memory.size(1);
    queries = linear(*q, x).view({b, t, heads, dh}).transpose(1, 2);
    auto parts = linear(*kv, memory).view({b, s, 2, heads, dh}).permute({2, 0, 3, 1, 4});
    keys = parts[0], values = parts[1];
  }
  auto scores = torch::matmul(queries, keys.transpose(-2, -1)) / std::sqrt(static_cast<double>(dh));
  if (causal) {
    auto mask = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(scores.device())).triu(1);
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  }
  auto attention = torch::dropout(torch::softmax(scores, -1), dropout, is_training());
  auto y = torch::matmul(attention, values).transpose(1, 2).reshape({b, t, d});
  return torch::dropout(linear(*proj, y), dropout, is_training());
}

Adapter::Adapter(int64_t width, int64_t bottleneck) {
  down = register_module("down", nn::Linear(width, bottleneck));
  up = register_module("up", nn::Linear(bottleneck, width));
}

torch::Tensor Adapter::forward(const torch::Tensor& h) { return h + linear(*up, torch::gelu(linear(*down, h))); }

Block::Block(const GptConfig& c) : dropout(c.dropout), geluTanh(c.geluTanh) {
  ln1 = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
  attn = register_module("attn", std::make_shared<Attention>(c, false));
  if (c.crossAttention) {
    lnCross = register_module("ln_cross", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
    cross = register_module("cross", std::make_shared<Attention>(c, true));
  }
  ln2 = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
  fc = register_module("fc", nn::Linear(c.dModel, c.dFf));
  proj = register_module("proj", nn::Linear(c.dFf, c.dModel));
  if (c.adapter > 0) {
    adapterAttn = register_module("adapter_attn", std::make_shared<Adapter>(c.dModel, c.adapter));
    if (cross) adapterCross = register_module("adapter_cross", std::make_shared<Adapter>(c.dModel, c.adapter));
    adapterMlp = register_module("adapter_mlp", std::make_shared<Adapter>(c.dModel, c.adapter));
  }
}

torch::Tensor Block::forward(torch::Tensor x, const torch::Tensor& memory) {
  auto a = attn->forward(ln1->forward(x), {});
  x = x + (adapterAttn ? adapterAttn->forward(a) : a);
  if (cross) {
    SKYTRAIN_CHECK(memory.defined(), "a cross-attention block needs the encoder's output");
    auto c = cross->forward(lnCross->forward(x), memory);
    x = x + (adapterCross ? adapterCross->forward(c) : c);
  }
  auto h = torch::dropout(linear(*proj, gelu(linear(*fc, ln2->forward(x)), geluTanh)), dropout, is_training());
  return x + (adapterMlp ? adapterMlp->forward(h) : h);
}

FactoredBlock::FactoredBlock(const GptConfig& c, int index, bool front, bool back)
    : split(c.split), index(index), front(front), back(back), dModel(c.dModel), dropout(c.dropout), geluTanh(c.geluTanh) {
  const bool fcSplit = split.layer == SplitPoint::Layer::Fc;
  const int in = fcSplit ? c.dModel : c.dFf, out = fcSplit ? c.dFf : c.dModel, r = split.rank;
  const std::string name = fcSplit ? "fc" : "proj";
  if (front) {
    ln1 = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
    attn = register_module("attn", std::make_shared<Attention>(c, false));
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

torch::Tensor FactoredBlock::forward(torch::Tensor x, const torch::Tensor&) {
  torch::Tensor residual;
  if (front) {
    x = x + attn->forward(ln1->forward(x), {});
    residual = x;
    auto h = ln2->forward(x);
    if (fc) h = gelu(linear(*fc, h), geluTanh);
    x = linear(*v, h);
    if (!back) return split.keepResidual ? torch::cat({x, residual}, -1) : x;
  } else if (split.keepResidual) {
    residual = x.narrow(-1, split.rank, dModel);
    x = x.narrow(-1, 0, split.rank);
  }
  auto h = linear(*u, linear(*s, x));
  if (proj) h = linear(*proj, gelu(h, geluTanh));
  h = torch::dropout(h, dropout, is_training());
  return split.keepResidual ? residual + h : h;
}

void FactoredBlock::factor(const torch::Tensor& w, const torch::Tensor& bias) {
  torch::NoGradGuard noGrad;
  auto [uFull, sFull, vh] = torch::linalg_svd(w.to(torch::kFloat), /*full_matrices=*/false);
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

std::string FactoredBlock::layerName() const {
  return "block" + std::to_string(index) + (split.layer == SplitPoint::Layer::Fc ? ".fc" : ".proj");
}

GptSlice::GptSlice(const GptConfig& c, int first, int last) : dropout(c.dropout), first(first) {
  const int64_t positions = c.positions > 0 ? c.positions : c.seqLen;
  if (first == 0) {
    tok = register_module("tok_emb", nn::Embedding(c.vocabSize, c.dModel));
    pos = register_parameter("pos_emb", torch::zeros({positions, c.dModel}));
  }
  const int k = c.split.block;
  auto add = [this](int index, std::shared_ptr<BlockBase> block) {
    blocks.push_back(register_module("block" + std::to_string(index), std::move(block)));
  };
  // The back half of the split block stays with its front unless the front ends a stage
  // that another stage follows.
  const bool backLeaves = c.split.enabled() && k == last - 1 && last < c.layers;
  if (c.split.enabled() && k == first - 1) add(k, std::make_shared<FactoredBlock>(c, k, false, true));
  if (c.cutRank > 0) {
    const auto norm = [width = c.dModel] { return nn::AnyModule(nn::LayerNorm(nn::LayerNormOptions({width}))); };
    cuts = SliceCuts(c.cuts, first, last, {c.vocabSize, c.dModel, c.cutRank, positions, c.senderLoss, norm});
  }
  for (int i = first; i < last; ++i) {
    cuts.registerBefore(*this, i);
    if (c.split.enabled() && i == k) {
      add(i, std::make_shared<FactoredBlock>(c, i, true, !backLeaves));
    } else {
      add(i, std::make_shared<Block>(c));
    }
  }
  if (c.recompute) {
    for (auto& block : blocks) recomputable.emplace_back([b = block.get()](const torch::Tensor& x) { return b->forward(x, {}); });
  }
  cuts.registerBefore(*this, last);
  if (last == c.layers) {
    lnF = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
    if (c.head && c.tieEmbeddings && tok) {
      tiedHead = true;  // the head is the embedding's own matrix
    } else if (c.head) {
      head = register_module(c.headName, nn::Linear(nn::LinearOptions(c.dModel, c.outputs > 0 ? c.outputs : c.vocabSize)
                                                        .bias(c.outputs > 0)));
    }
  }
}

torch::Tensor GptSlice::forward(const torch::Tensor& input, const torch::Tensor& memory) {
  torch::Tensor x = features(input, memory);
  if (tiedHead) return torch::linear(x, tok->weight);
  return head ? linear(*head, x) : x;
}

torch::Tensor GptSlice::features(const torch::Tensor& input, const torch::Tensor& memory) {
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
  const torch::Tensor ids = tok ? input : tokens;
  if (cuts.any()) x = cuts.enter(x, ids);
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (cuts.any()) x = cuts.inside(first + static_cast<int>(i), x, ids);
    x = recomputable.empty() || memory.defined() ? blocks[i]->forward(x, memory)
                                                 : recomputed(recomputable[i], x, dropout > 0 && is_training());
  }
  return lnF ? lnF->forward(x) : cuts.leave(x);
}

void initialiseParameters(nn::Module& module, const GptConfig& c, uint64_t seed) {
  torch::NoGradGuard noGrad;
  const double residualStd = 0.02 / std::sqrt(2.0 * c.layers);
  for (auto& item : module.named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    if (contains(name, ".ln") || name.rfind("ln_f", 0) == 0 || endsWith(name, "norm.weight")) {
      endsWith(name, "weight") ? p.fill_(1.0) : p.zero_();
    } else if (endsWith(name, "bias") || endsWith(name, ".up.weight") || endsWith(name, "cross.proj.weight")) {
      p.zero_();
    } else {
      // A tied head starts as the embedding it copies: drawn under the embedding's name.
      const std::string drawn = c.tieEmbeddings && name == c.headName + ".weight" ? "tok_emb.weight" : name;
      p.copy_(drawWeight(drawn, p.sizes().vec(), endsWith(name, "proj.weight") ? residualStd : 0.02, seed));
    }
  }
}

void initialise(GptSlice& slice, const GptConfig& c, uint64_t seed) {
  initialiseParameters(slice, c, seed);
  if (!c.split.enabled()) return;
  torch::NoGradGuard noGrad;
  const double residualStd = 0.02 / std::sqrt(2.0 * c.layers);
  const bool fcSplit = c.split.layer == SplitPoint::Layer::Fc;
  const std::vector<int64_t> shape = fcSplit ? std::vector<int64_t>{c.dFf, c.dModel} : std::vector<int64_t>{c.dModel, c.dFf};
  for (auto& block : slice.blocks) {
    if (auto factored = std::dynamic_pointer_cast<FactoredBlock>(block)) {
      const at::Tensor w = drawWeight(factored->layerName() + ".weight", shape, fcSplit ? 0.02 : residualStd, seed);
      factored->factor(w, torch::zeros({shape[0]}));
    }
  }
}

void validate(const GptConfig& c, int first, int last) {
  if (c.vocabSize < 1 || c.dModel < 1 || c.heads < 1 || c.layers < 1 || c.dFf < 1 || c.seqLen < 1 || c.adapter < 0) {
    throw Error("gpt: every size must be positive");
  }
  if (c.positions > 0 && c.positions < c.seqLen) {
    throw Error("gpt: seq_len " + std::to_string(c.seqLen) + " exceeds the model's " + std::to_string(c.positions) +
                " positions");
  }
  if (c.tieEmbeddings && (c.outputs > 0 || !c.head)) throw Error("gpt: only a vocabulary head can be tied to the embedding");
  if (c.dModel % c.heads != 0) {
    throw Error("gpt: d_model " + std::to_string(c.dModel) + " is not divisible by heads " +
                std::to_string(c.heads));
  }
  if (first < 0 || last > c.layers || first >= last) {
    throw Error("gpt: layer range [" + std::to_string(first) + ", " + std::to_string(last) +
                ") is not a non-empty range within [0, " + std::to_string(c.layers) + ")");
  }
  if (c.subspaceRank < 0 || c.subspaceRank > c.dModel) {
    throw Error("gpt: subspace rank " + std::to_string(c.subspaceRank) + " is not in [1, d_model " +
                std::to_string(c.dModel) + "]");
  }
  if ((c.subspaceRank > 0 || c.cutRank > 0) && (c.split.enabled() || c.adapter > 0 || c.crossAttention ||
                                                 c.outputs > 0 || !c.head || !c.causal)) {
    throw Error("gpt: a subspace model is a causal decoder with a vocabulary head, without split point, adapters "
                "or cross-attention");
  }
  checkCuts("gpt", c.cutRank, c.cuts, c.dModel, c.layers, c.subspaceRank, c.senderLoss);
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
    if (c.adapter > 0 || c.crossAttention) throw Error("gpt: a split point does not combine with adapters or cross-attention");
  }
}

}  // namespace skytrain::stages::detail
