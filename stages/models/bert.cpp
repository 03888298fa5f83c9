#include "stages/models/bert.h"

#include <torch/torch.h>

#include <cmath>
#include <string>

#include "scheduler/error.h"
#include "stages/models/gpt_modules.h"
#include "stages/module_stage.h"
#include "stages/split_backward.h"

namespace skytrain::stages {
namespace {

namespace nn = torch::nn;

nn::LayerNorm layerNorm(const BertConfig& c) {
  return nn::LayerNorm(nn::LayerNormOptions({c.dModel}).eps(c.normEps));
}

// Self-attention's four projections, with biases.
struct Projections : nn::Module {
  explicit Projections(const BertConfig& c) {
    for (const char* name : {"q", "k", "v", "o"}) layers.push_back(register_module(name, nn::Linear(c.dModel, c.dModel)));
  }
  std::vector<nn::Linear> layers;  // q, k, v, o
};

// Post-norm: LayerNorm(x + attention(x)), then LayerNorm(x + proj(gelu(fc(x)))).
struct Block : nn::Module {
  explicit Block(const BertConfig& c) : heads(c.heads) {
    attn = register_module("attn", std::make_shared<Projections>(c));
    ln1 = register_module("ln1", layerNorm(c));
    fc = register_module("fc", nn::Linear(c.dModel, c.dFf));
    proj = register_module("proj", nn::Linear(c.dFf, c.dModel));
    ln2 = register_module("ln2", layerNorm(c));
  }
  torch::Tensor forward(torch::Tensor x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads;
    auto& p = attn->layers;
    auto split = [&](nn::Linear& layer) { return linear(*layer, x).view({b, t, heads, hd}).transpose(1, 2); };
    auto scores = torch::matmul(split(p[0]), split(p[1]).transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    auto y = torch::matmul(torch::softmax(scores, -1), split(p[2])).transpose(1, 2).reshape({b, t, d});
    x = ln1->forward(x + linear(*p[3], y));
    return ln2->forward(x + linear(*proj, torch::gelu(linear(*fc, x))));
  }
  int64_t heads;
  std::shared_ptr<Projections> attn;
  nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  nn::Linear fc{nullptr}, proj{nullptr};
};

// The masked-LM head: LayerNorm(gelu(dense(h))) @ decoder^T + bias, the decoder being the
// word embeddings (or the last stage's copy of them).
struct MlmHead : nn::Module {
  explicit MlmHead(const BertConfig& c) {
    dense = register_module("dense", nn::Linear(c.dModel, c.dModel));
    ln = register_module("ln", layerNorm(c));
    bias = register_parameter("bias", torch::zeros({c.vocabSize}));
  }
  torch::Tensor forward(const torch::Tensor& h, const torch::Tensor& decoder) {
    return torch::linear(ln->forward(torch::gelu(linear(*dense, h))), decoder, bias);
  }
  nn::Linear dense{nullptr};
  nn::LayerNorm ln{nullptr};
  torch::Tensor bias;
};

// The decoder's copy of the word embeddings, on a last stage without them ("head.weight").
struct Copy : nn::Module {
  explicit Copy(const BertConfig& c) { weight = register_parameter("weight", torch::zeros({c.vocabSize, c.dModel})); }
  torch::Tensor weight;
};

struct Slice : nn::Module {
  Slice(const BertConfig& c, int first, int last) {
    if (first == 0) {
      tok = register_module("tok_emb", nn::Embedding(c.vocabSize, c.dModel));
      pos = register_module("pos_emb", nn::Embedding(c.positions, c.dModel));
      type = register_module("type_emb", nn::Embedding(c.typeVocab, c.dModel));
      embLn = register_module("emb_ln", layerNorm(c));
    }
    for (int i = first; i < last; ++i) blocks.push_back(register_module("block" + std::to_string(i), std::make_shared<Block>(c)));
    if (last == c.layers) {
      if (c.outputs > 0) {
        classifier = register_module("classifier", nn::Linear(c.dModel, c.outputs));
      } else {
        mlm = register_module("mlm", std::make_shared<MlmHead>(c));
        if (!tok) head = register_module("head", std::make_shared<Copy>(c));
      }
    }
  }
  torch::Tensor forward(const torch::Tensor& input) {
    torch::Tensor x = input;
    if (tok) {
      if (input.scalar_type() != torch::kLong || input.dim() != 2) {
        throw Error("first stage expects int64 token ids [batch, seq], got " +
                    std::string(c10::toString(input.scalar_type())) + " " + c10::str(input.sizes()));
      }
      if (input.size(1) > pos->weight.size(0)) {
        throw Error("sequence length " + std::to_string(input.size(1)) + " exceeds the model's " +
                    std::to_string(pos->weight.size(0)) + " positions");
      }
      // Every token is of type 0: the row of type_emb every position adds.
      x = embLn->forward(tok->forward(input) + pos->weight.narrow(0, 0, input.size(1)) + type->weight[0]);
    }
    for (auto& block : blocks) x = block->forward(x);
    if (classifier) return linear(*classifier, x);
    if (mlm) return mlm->forward(x, head ? head->weight : tok->weight);
    return x;
  }
  nn::Embedding tok{nullptr}, pos{nullptr}, type{nullptr};
  nn::LayerNorm embLn{nullptr};
  std::vector<std::shared_ptr<Block>> blocks;
  std::shared_ptr<MlmHead> mlm;
  std::shared_ptr<Copy> head;
  nn::Linear classifier{nullptr};
};

void validate(const BertConfig& c, int first, int last) {
  if (c.vocabSize < 1 || c.dModel < 1 || c.heads < 1 || c.layers < 1 || c.dFf < 1 || c.seqLen < 1 || c.typeVocab < 1 ||
      c.positions < c.seqLen) {
    throw Error("bert: every size must be positive and positions at least seq_len");
  }
  if (c.dModel % c.heads != 0) {
    throw Error("bert: d_model " + std::to_string(c.dModel) + " is not divisible by heads " + std::to_string(c.heads));
  }
  if (first < 0 || last > c.layers || first >= last) {
    throw Error("bert: layer range [" + std::to_string(first) + ", " + std::to_string(last) +
                ") is not a non-empty range within [0, " + std::to_string(c.layers) + ")");
  }
}

// BERT's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorms; the decoder's
// copy drawn as the word embeddings it copies.
void initialise(Slice& slice, uint64_t seed) {
  torch::NoGradGuard noGrad;
  for (auto& item : slice.named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    const bool norm = name.find("ln") != std::string::npos;
    if (norm) {
      detail::endsWith(name, "weight") ? p.fill_(1.0) : p.zero_();
    } else if (detail::endsWith(name, "bias")) {
      p.zero_();
    } else {
      const std::string drawn = name == "head.weight" ? "tok_emb.weight" : name;
      p.copy_(detail::drawWeight(drawn, p.sizes().vec(), 0.02, seed));
    }
  }
}

}  // namespace

std::unique_ptr<Stage> makeBertStage(const BertConfig& config, int firstLayer, int lastLayer, uint64_t seed,
                                     std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss) {
  validate(config, firstLayer, lastLayer);
  auto slice = std::make_shared<Slice>(config, firstLayer, lastLayer);
  initialise(*slice, seed);
  ModuleHooks hooks = ModuleStage::hooksOf(slice);
  hooks.forward = [slice](const at::Tensor& x) { return slice->forward(x); };
  hooks.loss = std::move(loss);
  return std::make_unique<ModuleStage>(std::move(hooks));
}

std::vector<int64_t> bertInputShape(const BertConfig& c, int firstLayer, int64_t samples) {
  if (firstLayer == 0) return {samples, c.seqLen};
  return {samples, c.seqLen, c.dModel};
}

double bertStashBytesPerSample(const BertConfig& c, int firstLayer, int lastLayer) {
  const double t = c.seqLen;
  double floats = (lastLayer - firstLayer) * t * (16.0 * c.dModel + 3.0 * c.dFf + 2.0 * c.heads * t);
  if (lastLayer == c.layers) floats += t * (c.outputs > 0 ? 2.0 * c.outputs : 4.0 * c.dModel + 2.0 * c.vocabSize);
  return 4.0 * floats;
}

int64_t bertParameterCount(const BertConfig& c, int firstLayer, int lastLayer) {
  validate(c, firstLayer, lastLayer);
  const int64_t d = c.dModel, ff = c.dFf;
  const int64_t block = 4 * (d * d + d) + 2 * 2 * d + (d * ff + ff) + (ff * d + d);
  int64_t count = block * (lastLayer - firstLayer);
  if (firstLayer == 0) count += (int64_t{c.vocabSize} + c.positions + c.typeVocab) * d + 2 * d;
  if (lastLayer == c.layers) {
    if (c.outputs > 0) {
      count += (d + 1) * c.outputs;
    } else {
      count += d * d + d + 2 * d + c.vocabSize + (firstLayer == 0 ? 0 : int64_t{c.vocabSize} * d);
    }
  }
  return count;
}

}  // namespace skytrain::stages
