#include "stages/models/llama.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "scheduler/error.h"
#include "stages/models/gpt_modules.h"
#include "stages/models/subspace/subspace_modules.h"
#include "stages/module_stage.h"
#include "stages/recompute.h"
#include "stages/split_backward.h"

namespace skytrain::stages {
namespace {

namespace nn = torch::nn;

nn::Linear bare(int64_t in, int64_t out) { return nn::Linear(nn::LinearOptions(in, out).bias(false)); }

// x * rsqrt(mean(x^2) + eps) * weight, over the last dimension.
struct RmsNorm : nn::Module {
  RmsNorm(int64_t width, double eps) : eps(eps) { weight = register_parameter("weight", torch::ones({width})); }
  torch::Tensor forward(const torch::Tensor& x) {
    return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
  }
  double eps;
  torch::Tensor weight;
};

// Rotary embeddings as Hugging Face applies them: the head's two halves rotate as pairs
// (x[j], x[j + hd/2]) by angle position * theta^(-2j/hd).
struct Rotary {
  Rotary(int64_t headDim, int64_t positions, double theta) {
    auto exponents = torch::arange(0, headDim, 2, torch::kDouble) / static_cast<double>(headDim);
    auto inverse = torch::pow(theta, exponents).reciprocal();
    auto angles = torch::outer(torch::arange(positions, torch::kDouble), inverse);
    auto both = torch::cat({angles, angles}, -1);
    cos = both.cos().to(torch::kFloat);
    sin = both.sin().to(torch::kFloat);
  }
  // x: [b, heads, T, hd]. The tables follow x to its device, once.
  torch::Tensor apply(const torch::Tensor& x) {
    if (cos.device() != x.device()) cos = cos.to(x.device()), sin = sin.to(x.device());
    const int64_t t = x.size(2), half = x.size(3) / 2;
    auto rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
    return x * cos.narrow(0, 0, t) + rotated * sin.narrow(0, 0, t);
  }
  torch::Tensor cos, sin;  // [positions, hd]
};

struct Attention : nn::Module {
  explicit Attention(const LlamaConfig& c)
      : heads(c.heads), kvHeads(c.kvHeads), headDim(c.dModel / c.heads), rotary(headDim, c.seqLen, c.ropeTheta) {
    q = register_module("q", bare(c.dModel, heads * headDim));
    k = register_module("k", bare(c.dModel, kvHeads * headDim));
    v = register_module("v", bare(c.dModel, kvHeads * headDim));
    o = register_module("o", bare(heads * headDim, c.subspaceRank > 0 ? c.subspaceRank : c.dModel));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t b = x.size(0), t = x.size(1);
    auto queries = rotary.apply(linear(*q, x).view({b, t, heads, headDim}).transpose(1, 2));
    auto keys = rotary.apply(linear(*k, x).view({b, t, kvHeads, headDim}).transpose(1, 2));
    auto values = linear(*v, x).view({b, t, kvHeads, headDim}).transpose(1, 2);
    if (kvHeads != heads) {  // key/value head j serves query heads [j·n, (j+1)·n)
      keys = keys.repeat_interleave(heads / kvHeads, 1);
      values = values.repeat_interleave(heads / kvHeads, 1);
    }
    auto scores = torch::matmul(queries, keys.transpose(-2, -1)) / std::sqrt(static_cast<double>(headDim));
    const auto mask = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool).device(scores.device())).triu(1);
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
    auto y = torch::matmul(torch::softmax(scores, -1), values).transpose(1, 2).reshape({b, t, heads * headDim});
    return linear(*o, y);
  }
  int64_t heads, kvHeads, headDim;
  Rotary rotary;
  nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
};

// down(silu(gate(x)) * up(x))
struct SwiGlu : nn::Module {
  explicit SwiGlu(const LlamaConfig& c) {
    gate = register_module("gate", bare(c.dModel, c.dFf));
    up = register_module("up", bare(c.dModel, c.dFf));
    down = register_module("down", bare(c.dFf, c.subspaceRank > 0 ? c.subspaceRank : c.dModel));
  }
  torch::Tensor forward(const torch::Tensor& x) { return linear(*down, torch::silu(linear(*gate, x)) * linear(*up, x)); }
  nn::Linear gate{nullptr}, up{nullptr}, down{nullptr};
};

struct Block : nn::Module {
  explicit Block(const LlamaConfig& c) {
    attnNorm = register_module("attn_norm", std::make_shared<RmsNorm>(c.dModel, c.normEps));
    attn = register_module("attn", std::make_shared<Attention>(c));
    mlpNorm = register_module("mlp_norm", std::make_shared<RmsNorm>(c.dModel, c.normEps));
    mlp = register_module("mlp", std::make_shared<SwiGlu>(c));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn->forward(attnNorm->forward(x));
    return x + mlp->forward(mlpNorm->forward(x));
  }
  // A subspace block: both branches write the k coefficients, each reading h rebuilt from them.
  torch::Tensor forward(torch::Tensor c, const torch::Tensor& fixed, const detail::SubspaceFrame& frame) {
    c = c + attn->forward(attnNorm->forward(frame.lift(fixed, c)));
    return c + mlp->forward(mlpNorm->forward(frame.lift(fixed, c)));
  }
  std::shared_ptr<RmsNorm> attnNorm, mlpNorm;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<SwiGlu> mlp;
};

struct Slice : nn::Module {
  Slice(const LlamaConfig& c, int first, int last, uint64_t seed) : rank(c.subspaceRank), first(first) {
    if (rank > 0) {
      frame = register_module("subspace", std::make_shared<detail::SubspaceFrame>(c.vocabSize, c.dModel, rank, 0, seed));
    }

    if (first == 0) tok = register_module("tok_emb", nn::Embedding(c.vocabSize, rank > 0 ? rank : c.dModel));
    if (c.cutRank > 0) {
      const auto norm = [width = c.dModel, eps = c.normEps] {
        return nn::AnyModule(std::make_shared<RmsNorm>(width, eps));
      };
      cuts = detail::SliceCuts(c.cuts, first, last, {c.vocabSize, c.dModel, c.cutRank, 0, c.senderLoss, norm});
    }
    for (int i = first; i < last; ++i) {
      cuts.registerBefore(*this, i);
      blocks.push_back(register_module("block" + std::to_string(i), std::make_shared<Block>(c)));
    }
    cuts.registerBefore(*this, last);
    for (auto& block : blocks) {
      if (!c.recompute) break;
      if (frame) {  // the replay gets [c, F] and splits it
        recomputable.push_back(detail::subspaceRecompute(
            [b = block.get(), this](const torch::Tensor& x, const torch::Tensor& f) { return b->forward(x, f, *frame); }, rank));
      } else {
        recomputable.emplace_back([b = block.get()](const torch::Tensor& x) { return b->forward(x); });
      }
    }
    if (last == c.layers) {
      norm = register_module("norm", std::make_shared<RmsNorm>(c.dModel, c.normEps));
      // Tied and holding the embedding: the head is the embedding's own matrix.
      // A subspace model's tied copy is the k-wide embedding (SubspaceFrame::tiedLogits).
      if (!(c.tieEmbeddings && tok)) head = register_module("head", bare(c.tieEmbeddings && rank > 0 ? rank : c.dModel, c.vocabSize));
      tied = c.tieEmbeddings;
    }
  }
  torch::Tensor forward(const torch::Tensor& input) {
    if (frame) return forwardSubspace(input);
    torch::Tensor x = input;
    if (tok) {
      if (input.scalar_type() != torch::kLong || input.dim() != 2) {
        throw Error("first stage expects int64 token ids [batch, seq], got " +
                    std::string(c10::toString(input.scalar_type())) + " " + c10::str(input.sizes()));
      }
      x = tok->forward(input);
    }
    if (x.size(1) > seqLen) {
      throw Error("sequence length " + std::to_string(x.size(1)) + " exceeds the model's " + std::to_string(seqLen));
    }
    const torch::Tensor ids = tok ? input : tokens;
    if (cuts.any()) x = cuts.enter(x, ids);
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (cuts.any()) x = cuts.inside(first + static_cast<int>(i), x, ids);
      x = recomputable.empty() ? blocks[i]->forward(x) : recomputed(recomputable[i], x, /*replayRng=*/false);
    }
    if (!norm) return cuts.leave(x);
    x = norm->forward(x);
    return head ? linear(*head, x) : torch::linear(x, tok->weight);
  }
  torch::Tensor forwardSubspace(const torch::Tensor& input) {
    torch::Tensor c, ids = tokens;
    if (tok) {
      if (input.scalar_type() != torch::kLong || input.dim() != 2) {
        throw Error("first stage expects int64 token ids [batch, seq], got " +
                    std::string(c10::toString(input.scalar_type())) + " " + c10::str(input.sizes()));
      }
      ids = input;
      c = tok->forward(input);
    } else {
      detail::checkSubspaceInput(input, ids, rank);
      c = input;
    }
    if (c.size(1) > seqLen) {
      throw Error("sequence length " + std::to_string(c.size(1)) + " exceeds the model's " + std::to_string(seqLen));
    }
    const torch::Tensor fixed = frame->fixed(ids);
    for (size_t i = 0; i < blocks.size(); ++i) {
      c = recomputable.empty() ? blocks[i]->forward(c, fixed, *frame)
                               : detail::subspaceBlock(recomputable[i], c, fixed, /*replayRng=*/false);
    }
    if (!norm) return c;
    const torch::Tensor h = norm->forward(frame->lift(fixed, c));
    return tied ? frame->tiedLogits(h, head ? head->weight : tok->weight) : linear(*head, h);
  }
  int64_t rank = 0;
  std::shared_ptr<detail::SubspaceFrame> frame;
  torch::Tensor tokens;  // a subspace slice after the first: the ids of the next forward's input
  int first = 0;
  detail::SliceCuts cuts;  // LlamaConfig::cutRank: the learned codes at the cuts it touches
  int64_t seqLen = 0;
  nn::Embedding tok{nullptr};
  std::vector<std::shared_ptr<Block>> blocks;
  std::vector<BlockFunction> recomputable;  // recompute: each block's forward
  std::shared_ptr<RmsNorm> norm;
  nn::Linear head{nullptr};
  bool tied = false;
};

void initialise(Slice& slice, const LlamaConfig& c, uint64_t seed) {
  torch::NoGradGuard noGrad;
  const double residualStd = 0.02 / std::sqrt(2.0 * c.layers);
  for (auto& item : slice.named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    if (detail::endsWith(name, "norm.weight")) {
      p.fill_(1.0);
    } else {
      // A tied head starts as the embedding it copies: drawn under the embedding's name.
      const std::string drawn = name == "head.weight" && c.tieEmbeddings ? "tok_emb.weight" : name;
      const bool residual = detail::endsWith(name, ".o.weight") || detail::endsWith(name, ".down.weight");
      p.copy_(detail::drawWeight(drawn, p.sizes().vec(), residual ? residualStd : 0.02, seed));
    }
  }
}

}  // namespace

void validateLlama(const LlamaConfig& c, int first, int last) {
  if (c.vocabSize < 1 || c.dModel < 1 || c.heads < 1 || c.kvHeads < 1 || c.layers < 1 || c.dFf < 1 || c.seqLen < 1) {
    throw Error("llama: every size must be positive");
  }
  if (c.dModel % c.heads != 0 || (c.dModel / c.heads) % 2 != 0) {
    throw Error("llama: d_model " + std::to_string(c.dModel) + " over heads " + std::to_string(c.heads) +
                " is not an even head width (rotary embeddings rotate pairs)");
  }
  if (c.heads % c.kvHeads != 0) {
    throw Error("llama: heads " + std::to_string(c.heads) + " is not a multiple of kv_heads " + std::to_string(c.kvHeads));
  }
  if (!(c.ropeTheta > 0) || !(c.normEps > 0)) throw Error("llama: rope_theta and norm_eps must be positive");
  if (first < 0 || last > c.layers || first >= last) {
    throw Error("llama: layer range [" + std::to_string(first) + ", " + std::to_string(last) +
                ") is not a non-empty range within [0, " + std::to_string(c.layers) + ")");
  }
  if (c.subspaceRank < 0 || c.subspaceRank > c.dModel) {
    throw Error("llama: subspace rank " + std::to_string(c.subspaceRank) + " is not in [1, d_model " +
                std::to_string(c.dModel) + "]");
  }
  detail::checkCuts("llama", c.cutRank, c.cuts, c.dModel, c.layers, c.subspaceRank, c.senderLoss);
}

std::unique_ptr<Stage> makeLlamaStage(const LlamaConfig& config, int firstLayer, int lastLayer, uint64_t seed) {
  validateLlama(config, firstLayer, lastLayer);
  auto slice = std::make_shared<Slice>(config, firstLayer, lastLayer, seed);
  slice->seqLen = config.seqLen;
  initialise(*slice, config, seed);
  ModuleHooks hooks = ModuleStage::hooksOf(slice);
  hooks.forward = [slice](const at::Tensor& x) { return slice->forward(x); };
  if (slice->cuts.any()) {
    hooks.setTokens = [slice](const at::Tensor& ids) { slice->tokens = ids; };
    detail::hookCuts(hooks, std::shared_ptr<detail::SliceCuts>(slice, &slice->cuts));
    hooks.adopt = [slice, layers = config.layers](const std::function<at::Tensor(const std::string&)>& find) {
      return slice->cuts.adopt(
          find, [](int layer) { return detail::writerNames(layer, {"attn.o", "mlp.down"}); }, layers);
    };
  }
  if (slice->frame) {
    hooks.setTokens = [slice](const at::Tensor& ids) { slice->tokens = ids; };
    // A pretrained LLaMA into the subspace form (detail::adoptPretrained): o and down write.
    hooks.adopt = [slice, config, firstLayer](const std::function<at::Tensor(const std::string&)>& find) {
      const std::vector<std::string> writers = detail::writerNames(config.layers, {"attn.o", "mlp.down"});
      std::vector<std::pair<std::string, nn::Linear>> own;
      for (size_t i = 0; i < slice->blocks.size(); ++i) {
        const std::string block = "block" + std::to_string(firstLayer + static_cast<int>(i));
        own.emplace_back(block + ".attn.o", slice->blocks[i]->attn->o);
        own.emplace_back(block + ".mlp.down", slice->blocks[i]->mlp->down);
      }
      return detail::adoptPretrained(*slice->frame, find, writers, own, slice->tok, torch::Tensor(), slice->head, slice->tied);
    };
  }
  return std::make_unique<ModuleStage>(std::move(hooks));
}

std::vector<int64_t> llamaInputShape(const LlamaConfig& c, int firstLayer, int64_t samples) {
  if (firstLayer == 0) return {samples, c.seqLen};
  if (c.cutRank > 0 && std::find(c.cuts.begin(), c.cuts.end(), firstLayer) != c.cuts.end()) {
    return {samples, c.seqLen, c.cutRank};
  }
  return {samples, c.seqLen, c.subspaceRank > 0 ? c.subspaceRank : c.dModel};
}

double llamaStashBytesPerSample(const LlamaConfig& c, int firstLayer, int lastLayer) {
  const double t = c.seqLen;
  const double block = t * (10.0 * c.dModel + 4.0 * c.dFf + 2.0 * c.heads * t);
  // Recompute: every block's input, and one block's activations while it is replayed.
  double floats = c.recompute ? (lastLayer - firstLayer) * t * c.dModel + block : (lastLayer - firstLayer) * block;
  if (lastLayer == c.layers) floats += 2.0 * t * c.vocabSize;
  if (c.subspaceRank > 0) floats += (lastLayer - firstLayer + 1) * 2.0 * t * c.dModel;  // F and each rebuilt h
  floats += cutCodeStashFloats(c.cutRank, c.cuts, firstLayer, lastLayer, t, c.dModel, c.senderLoss > 0 ? c.vocabSize : 0);
  return 4.0 * floats;
}

int64_t llamaParameterCount(const LlamaConfig& c, int firstLayer, int lastLayer) {
  validateLlama(c, firstLayer, lastLayer);
  const int64_t d = c.dModel, hd = c.dModel / c.heads;
  if (c.subspaceRank > 0) {  // o and down write k numbers; every stage holds the frozen frame
    const int64_t k = c.subspaceRank;
    const int64_t block = 2 * d + d * c.heads * hd + c.heads * hd * k + 2 * d * c.kvHeads * hd + 2 * d * int64_t{c.dFf} +
                          int64_t{c.dFf} * k;
    int64_t count = block * (lastLayer - firstLayer) + subspaceFrameCount(c.vocabSize, d, k, 0);
    if (firstLayer == 0) count += int64_t{c.vocabSize} * k;
    // Tied: the head is the k-wide embedding, the first stage's own or a copy.
    const int64_t head = c.tieEmbeddings ? (firstLayer == 0 ? 0 : int64_t{c.vocabSize} * k) : int64_t{c.vocabSize} * d;
    if (lastLayer == c.layers) count += d + head;
    return count;
  }
  const int64_t block = 2 * d + d * c.heads * hd * 2 + 2 * d * c.kvHeads * hd + 3 * d * int64_t{c.dFf};
  int64_t count = block * (lastLayer - firstLayer);
  if (firstLayer == 0) count += int64_t{c.vocabSize} * d;
  count += cutCodeParameterCount(c.cutRank, c.cuts, firstLayer, lastLayer, c.vocabSize, d, 0,
                                 c.senderLoss > 0 ? d + d * int64_t{c.vocabSize} : 0);
  if (lastLayer == c.layers) count += d + (c.tieEmbeddings && firstLayer == 0 ? 0 : int64_t{c.vocabSize} * d);
  return count;
}

}  // namespace skytrain::stages
