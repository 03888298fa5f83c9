// A GPT-style causal language model, buildable as any consecutive range of its blocks; with
// causal off, the same stack is a bidirectional encoder (the zoo's MLM encoder and ELECTRA).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <memory>
#include <vector>

#include "stages/stage.h"

namespace skytrain::stages {

// A low-rank split point (the source article's method for fine-tuning across clouds):
// linear layer `layer` of block `block`, W (m x d), is factored by SVD into three layers
// V (r x d), S (r x r), U (m x r) keeping the top r singular values. A stage boundary placed
// right after that block cuts between V and S, so each token sends r numbers instead of d.
// Without keepResidual the block's MLP residual branch is removed (its input would have to
// cross too); with it, the boundary tensor is [V output, residual] (r + d numbers).
struct SplitPoint {
  enum class Layer { Fc, Proj };  // the MLP's d->d_ff or d_ff->d layer
  int block = -1;                  // -1: no split point
  Layer layer = Layer::Fc;
  int rank = 8;
  bool keepResidual = false;

  bool enabled() const { return block >= 0; }
};

struct GptConfig {
  int vocabSize = 256;
  int dModel = 128;
  int heads = 4;
  int layers = 4;  // transformer blocks
  int dFf = 512;
  int seqLen = 64;
  double dropout = 0.0;
  SplitPoint split;
  bool causal = true;  // false: a bidirectional encoder (MLM, ELECTRA)
  int outputs = 0;     // the head's outputs per token; 0: vocabulary logits (no bias)
  std::string headName = "head";  // "classifier": a head that init_from of a pretrained model leaves alone
  bool head = true;     // false: the last stage outputs ln_f of the last block (an encoder's memory)
  int adapter = 0;      // bottleneck width of an adapter on every sub-layer's output; 0: none
  bool crossAttention = false;  // a decoder block attends to an encoder's output (translation)
  int positions = 0;     // rows of the learned position table; 0: seqLen (GPT-2: 1024)
  bool geluTanh = false;  // GELU with the tanh approximation (GPT-2's "gelu_new")
  // The vocabulary head is the token embedding's matrix: one tensor in a stage holding both
  // ends; else the last stage's head starts as a copy and the runner keeps the two equal.
  bool tieEmbeddings = false;
  // Activation recompute: each block keeps only its input for the backward, and runs its
  // forward again there (stages/recompute.h). Blocks that attend to memory keep theirs.
  bool recompute = false;
  // A subspace model (Protocol Models, Ramasinghe et al. 2025) when > 0: the residual stream
  // is h = F + c Uᵀ, F = a frozen token table's row + a frozen position row (d_model wide, drawn
  // from the seed), U a fixed orthonormal d_model x k basis, and c the k coefficients the
  // model trains: the token and position embeddings' trainable parts are k wide, and every
  // block's two output projections (attention's and the MLP's) write k numbers into c. Each
  // stage rebuilds F from the token ids it reads itself, so exactly k numbers a token cross a
  // cut, and the gradient crossing back is the k-wide dL/dc. The head reads the whole h.
  int subspaceRank = 0;
  // A learned code at each cut (model.subspace method "cut") when > 0: the blocks are
  // unconstrained, and at each layer in `cuts` the hidden state becomes
  // tokens[id] + positions[t] + decode(encode(h)), encode d_model -> k and decode k -> d_model
  // learned, and the anchor tables (d_model wide) learned by the stage after the cut. A stage
  // ending at a cut sends encode(h), k numbers a token; the one starting there rebuilds its
  // input from them and the token ids; the gradient crossing back is the k-wide dL/dcode.
  // Cuts inside a stage (the whole model in one process) compute the same.
  int cutRank = 0;
  std::vector<int> cuts;  // the layers a cut precedes, each in (0, layers)
  // With a code: the sender's own loss at weight senderLoss when > 0. The state the stage
  // before each cut encodes also predicts the next token through a head of its own (the
  // family's norm, then a d_model x vocab linear map, "cut<layer>.sender_norm" and
  // ".sender_head"), and that loss, times senderLoss, is added to the model's: the blocks before
  // a cut learn from a loss of their own, not only through the code, and the blocks after it
  // keep reading the code (docs/models.md). Nothing more crosses: every stage reads its own
  // targets. Not part of the model's output, nor of its validation loss.
  double senderLoss = 0;
};

// Stage holding blocks [firstLayer, lastLayer). The stage with firstLayer == 0 also holds
// the token and position embeddings (its input is token ids [b, T]); the one with
// lastLayer == layers holds the final norm and the LM head (its output is logits
// [b, T, vocab]); the others map [b, T, d] to [b, T, d]. Every parameter is initialised
// from (seed, its global name) alone, so a stage has exactly the weights that range has in
// the unsplit model built with the same seed. Throws skytrain::Error on a bad range.
//
// With a split point at block k, the stage holding block k holds its front half (through V);
// the back half (S, U and what follows in the block) goes to the next stage when k is
// that stage's last block and another stage follows, else stays with the front.
// `loss`: the last stage's loss of (output, targets); empty: token cross-entropy.
std::unique_ptr<Stage> makeGptStage(const GptConfig& config, int firstLayer, int lastLayer, uint64_t seed,
                                    std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss = {});

// Shape of the input of the stage starting at firstLayer, for `samples` sequences: token ids
// [samples, T] on the first stage, else [samples, T, width] with the width of what crosses
// the boundary (d_model, the split point's r (+ d_model with its residual), or the subspace's k).
std::vector<int64_t> gptInputShape(const GptConfig& config, int firstLayer, int64_t samples);

// Estimated activation memory the stage keeps per in-flight sample for its backward
// (float32): per block ~ T (16 d + 3 d_ff + 2 heads T), plus logits on the last stage.
double gptStashBytesPerSample(const GptConfig& config, int firstLayer, int lastLayer);

// Parameter count of blocks [firstLayer, lastLayer) with the embeddings/head they hold,
// without a split point. A subspace stage also holds its frozen tables and basis, which count
// here too (they take memory like weights, but neither train nor get optimizer state).
int64_t gptParameterCount(const GptConfig& config, int firstLayer, int lastLayer);

// Elements of a subspace model's frozen frame, which every stage holds: a vocab x width token
// table, a positions x width position table (none at 0: a LLaMA's), a width x rank basis.
int64_t subspaceFrameCount(int64_t vocab, int64_t width, int64_t rank, int64_t positions);

// A learned code at the cuts (GptConfig::cutRank, LlamaConfig::cutRank) in blocks
// [firstLayer, lastLayer): the parameters of the cut sides the stage holds (encode before a
// cut, with `senderHead` more for a sender's loss (its norm and head; 0 without), decode and
// the anchor tables after it; positions 0 for a LLaMA), and the floats a sample keeps for the
// backward (each code and the hidden state rebuilt from it; a sender's logits over
// `senderVocab` classes, 0 without a sender's loss).
int64_t cutCodeParameterCount(int rank, const std::vector<int>& cuts, int firstLayer, int lastLayer, int64_t vocab,
                              int64_t width, int64_t positions, int64_t senderHead);
double cutCodeStashFloats(int rank, const std::vector<int>& cuts, int firstLayer, int lastLayer, double seqLen,
                          int64_t width, int64_t senderVocab);

}  // namespace skytrain::stages
