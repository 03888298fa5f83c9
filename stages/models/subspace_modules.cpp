#include "stages/models/subspace_modules.h"

#include <string>

#include "scheduler/error.h"
#include "stages/recompute.h"
#include "stages/split_backward.h"

namespace skytrain::stages::detail {

SubspaceFrame::SubspaceFrame(int64_t vocab, int64_t width, int64_t rank, int64_t positions, uint64_t seed) {
  tokens = register_buffer("tokens", drawWeight("subspace.tokens", {vocab, width}, 0.02, seed));
  if (positions > 0) {
    this->positions = register_buffer("positions", drawWeight("subspace.positions", {positions, width}, 0.02, seed));
  }
  // Orthonormal columns: the Q of a Gaussian matrix's QR, computed here on the CPU by every
  // stage from the same draw.
  const torch::Tensor gaussian = drawWeight("subspace.basis", {width, rank}, 1.0, seed);
  basis = register_buffer("basis", std::get<0>(torch::linalg_qr(gaussian)).contiguous());
}

torch::Tensor SubspaceFrame::fixed(const torch::Tensor& ids) const {
  const torch::Tensor rows = torch::embedding(tokens, ids);
  return positions.defined() ? rows + positions.slice(0, 0, ids.size(1)) : rows;
}

torch::Tensor SubspaceFrame::lift(const torch::Tensor& fixed, const torch::Tensor& coefficients) const {
  return fixed + torch::matmul(coefficients, basis.t());
}

BlockFunction subspaceRecompute(std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> block,
                                int64_t rank) {
  return [block = std::move(block), rank](const torch::Tensor& stashed) {
    return block(stashed.narrow(-1, 0, rank), stashed.narrow(-1, rank, stashed.size(-1) - rank));
  };
}

torch::Tensor subspaceBlock(const BlockFunction& replay, const torch::Tensor& c, const torch::Tensor& fixed,
                            bool replayRng) {
  return recomputed(replay, torch::cat({c, fixed}, -1), replayRng);
}

void checkSubspaceInput(const torch::Tensor& input, const torch::Tensor& ids, int64_t rank) {
  if (input.dim() != 3 || input.size(2) != rank || !input.is_floating_point()) {
    throw Error("a subspace stage expects coefficients [batch, seq, " + std::to_string(rank) + "], got " +
                c10::str(input.sizes()));
  }
  if (!ids.defined() || ids.dim() != 2 || ids.size(0) != input.size(0) || ids.size(1) != input.size(1)) {
    throw Error("a subspace stage needs the token ids of its input [" + std::to_string(input.size(0)) + ", " +
                std::to_string(input.size(1)) + "] (setTokens), got " +
                (ids.defined() ? c10::str(ids.sizes()) : std::string("none")));
  }
}

SubspaceBlock::SubspaceBlock(const GptConfig& c) : dropout(c.dropout), geluTanh(c.geluTanh) {
  ln1 = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
  attn = register_module("attn", std::make_shared<Attention>(c, false, c.subspaceRank));
  ln2 = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
  fc = register_module("fc", nn::Linear(c.dModel, c.dFf));
  proj = register_module("proj", nn::Linear(c.dFf, c.subspaceRank));
}

torch::Tensor SubspaceBlock::forward(torch::Tensor coefficients, const torch::Tensor& fixed, const SubspaceFrame& frame) {
  coefficients = coefficients + attn->forward(ln1->forward(frame.lift(fixed, coefficients)), {});
  const torch::Tensor h = ln2->forward(frame.lift(fixed, coefficients));
  return coefficients + torch::dropout(linear(*proj, gelu(linear(*fc, h), geluTanh)), dropout, is_training());
}

SubspaceSlice::SubspaceSlice(const GptConfig& c, int first, int last, uint64_t seed)
    : rank(c.subspaceRank), seqLen(c.seqLen), dropout(c.dropout) {
  frame = register_module("subspace", std::make_shared<SubspaceFrame>(c.vocabSize, c.dModel, c.subspaceRank,
                                                                       c.positions > 0 ? c.positions : c.seqLen, seed));
  if (first == 0) {
    tok = register_module("tok_emb", nn::Embedding(c.vocabSize, c.subspaceRank));
    pos = register_parameter("pos_emb", torch::zeros({c.positions > 0 ? c.positions : c.seqLen, c.subspaceRank}));
  }
  for (int i = first; i < last; ++i) {
    blocks.push_back(register_module("block" + std::to_string(i), std::make_shared<SubspaceBlock>(c)));
    if (c.recompute) {
      recomputable.push_back(subspaceRecompute(
          [b = blocks.back().get(), this](const torch::Tensor& x, const torch::Tensor& f) { return b->forward(x, f, *frame); },
          rank));
    }
  }
  if (last == c.layers) {
    lnF = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
    head = register_module(c.headName, nn::Linear(nn::LinearOptions(c.dModel, c.vocabSize).bias(false)));
  }
}

torch::Tensor SubspaceSlice::forward(const torch::Tensor& input) {
  torch::Tensor coefficients;
  torch::Tensor ids = tokens;
  if (tok) {
    if (input.scalar_type() != torch::kLong || input.dim() != 2 || input.size(1) > pos.size(0)) {
      throw Error("a subspace model's first stage expects int64 token ids [batch, <= " + std::to_string(pos.size(0)) +
                  "], got " + std::string(c10::toString(input.scalar_type())) + " " + c10::str(input.sizes()));
    }
    ids = input;
    coefficients = torch::dropout(tok->forward(input) + pos.slice(0, 0, input.size(1)), dropout, is_training());
  } else {
    checkSubspaceInput(input, ids, rank);
    coefficients = input;
  }
  const torch::Tensor fixed = frame->fixed(ids);
  for (size_t i = 0; i < blocks.size(); ++i) {
    coefficients = recomputable.empty() ? blocks[i]->forward(coefficients, fixed, *frame)
                                        : subspaceBlock(recomputable[i], coefficients, fixed, dropout > 0 && is_training());
  }
  if (!lnF) return coefficients;
  return linear(*head, lnF->forward(frame->lift(fixed, coefficients)));
}

}  // namespace skytrain::stages::detail
