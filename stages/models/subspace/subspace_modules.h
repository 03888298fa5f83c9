// A subspace GPT's modules (GptConfig::subspaceRank): the frozen frame every stage rebuilds
// alike, the block that writes k coefficients, and a slice of the stack. Internal to the
// stages library (it includes Torch): stages/models/gpt.h is the interface.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stages/models/gpt_modules.h"

namespace skytrain::stages::detail {

// The part of the residual stream no stage trains: a token table and (GPT) a position table,
// d_model wide, and the orthonormal basis U (d_model x k), drawn from (seed, their names)
// alone by integer arithmetic and an fma Gram-Schmidt, so every stage holds the same bits on
// any CPU (or converted from a pretrained model: adoptPretrained). Buffers: they move with the module and are in
// its state dict, so checkpoints restore them exactly.
struct SubspaceFrame : nn::Module {
  // positions 0: no position table (a LLaMA's positions are rotary, inside attention).
  SubspaceFrame(int64_t vocab, int64_t width, int64_t rank, int64_t positions, uint64_t seed);
  // F for token ids [b, t]: [b, t, d].
  torch::Tensor fixed(const torch::Tensor& ids) const;
  // h = F + c Uᵀ.
  torch::Tensor lift(const torch::Tensor& fixed, const torch::Tensor& coefficients) const;
  // A tied head's logits: h against the whole token table, the frozen rows plus the trained
  // k-wide embedding [vocab, k] on U: h·(tokens + embedding·Uᵀ)ᵀ.
  torch::Tensor tiedLogits(const torch::Tensor& h, const torch::Tensor& embedding) const;

  torch::Tensor tokens, positions, basis;  // positions undefined without a table
};

// A pretrained, unconstrained model's tensors (`find`: by that model's names, undefined when
// absent) brought into the subspace form, for fine-tuning. U is the top-k left singular vectors
// of every block's output projections side by side (the directions they write into the
// residual stream most), from their Gram matrix in float64, each column's largest entry made
// positive, so every stage finds the same U from the same file. The frozen tables keep the
// embeddings' part outside U, the k-wide trainable embeddings (`tok`, `pos` on the first
// slice; else null and undefined) their part inside it, so h starts as the pretrained
// embedding; each output projection W (and bias b) becomes UᵀW (Uᵀb). `writers`: every
// block's output projection in the whole model, by name without ".weight"; `own`: the slice's
// ones among them, with their modules. `head`: the last slice's, else null; a tied (`tied`) copy
// [vocab, k] starts as the embedding's part inside U, an untied head the file lacks (a tied
// checkpoint, untied here) as the embedding, then trains apart. Returns the names it set, none when `find` holds a
// subspace model's own frame (subspace.basis: it loads by name) or no token table d_model
// wide. Throws skytrain::Error naming a missing or misshapen tensor.
using TensorFind = std::function<torch::Tensor(const std::string&)>;
// The names adoptPretrained reads: "block<i>.<suffix>" for every block of `layers` and each
// of `suffixes` (a family's output projections: GPT's "attn.proj" and "proj").
std::vector<std::string> writerNames(int layers, const std::vector<std::string>& suffixes);
// `t`, a file's tensor `name`, checked to be [rows, columns] (-1: any), floating and finite,
// or a skytrain::Error naming it (`what`: what the conversion reads it as, for a missing one).
torch::Tensor checkedFileTensor(const torch::Tensor& t, const std::string& name, int64_t rows, int64_t columns,
                                const char* what);
// U for a conversion: the top `rank` eigenvectors (float64, [width, rank]) of the Gram
// matrix of `writers` (names without ".weight", each [width, n], biases too), each column's
// largest entry made positive. Throws skytrain::Error naming a missing, misshapen or
// non-finite tensor, or when the eigensolver fails.
torch::Tensor writerBasis(const TensorFind& find, const std::vector<std::string>& writers, int64_t width, int64_t rank);
// A table [rows, width]'s coordinates in `basis` (float64 [width, k]) as float [rows, k],
// its part outside the basis written into `outside`; in float64 4,096 rows at a time (a
// 128k x 4096 table would take 4 GB at once).
torch::Tensor splitTable(const torch::Tensor& full, const torch::Tensor& basis, torch::Tensor& outside);
std::vector<std::string> adoptPretrained(SubspaceFrame& frame, const TensorFind& find,
                                         const std::vector<std::string>& writers,
                                         const std::vector<std::pair<std::string, nn::Linear>>& own,
                                         const nn::Embedding& tok, const torch::Tensor& pos, const nn::Linear& head,
                                         bool tied);

// Block recompute for a subspace block: what stays stashed is [c, F] (k + d_model numbers a
// token), and the replay splits it again. `block(c, F)` is the block's forward.
BlockFunction subspaceRecompute(std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> block,
                                int64_t rank);
// The block's output c through `replay` (made by subspaceRecompute), or the block itself
// without recompute.
torch::Tensor subspaceBlock(const BlockFunction& replay, const torch::Tensor& c, const torch::Tensor& fixed,
                            bool replayRng);

// Checks a subspace stage's input after the first: float coefficients [b, t, rank], and the
// token ids [b, t] given for them (setTokens). Throws skytrain::Error naming what is wrong.
void checkSubspaceInput(const torch::Tensor& input, const torch::Tensor& ids, int64_t rank);

// A pre-norm block whose two residual branches write k coefficients: c += attn(ln1(h)), then
// c += proj(gelu(fc(ln2(h)))), h rebuilt from c before each.
struct SubspaceBlock : nn::Module {
  explicit SubspaceBlock(const GptConfig& c);
  torch::Tensor forward(torch::Tensor coefficients, const torch::Tensor& fixed, const SubspaceFrame& frame);

  double dropout;
  bool geluTanh;
  nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  std::shared_ptr<Attention> attn;
  nn::Linear fc{nullptr}, proj{nullptr};
};

// Blocks [first, last): the first slice also holds the embeddings' trainable parts (k wide),
// the last one ln_f and the head (over the whole h; tied: the frozen token table plus the
// k-wide embedding, a copy of it [vocab, k] on a last stage after the first). Input: token ids on the first slice,
// else the coefficients [b, t, k] with the ids given by setTokens; output: the coefficients,
// or logits on the last.
struct SubspaceSlice : nn::Module {
  SubspaceSlice(const GptConfig& c, int first, int last, uint64_t seed);
  torch::Tensor forward(const torch::Tensor& input);
  // The token ids of the micro-batch the next forward runs (a slice after the first).
  void setTokens(const torch::Tensor& ids) { tokens = ids; }

  int64_t rank, seqLen;
  double dropout;
  std::shared_ptr<SubspaceFrame> frame;
  nn::Embedding tok{nullptr};
  torch::Tensor pos;
  std::vector<std::shared_ptr<SubspaceBlock>> blocks;
  std::vector<BlockFunction> recomputable;  // recompute: each block's replay
  nn::LayerNorm lnF{nullptr};
  nn::Linear head{nullptr};
  bool tied = false;
  torch::Tensor tokens;
};

}  // namespace skytrain::stages::detail
