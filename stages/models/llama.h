// The LLaMA family (Touvron et al. 2023, as Hugging Face's LlamaForCausalLM computes it):
// RMSNorm, rotary position embeddings, SwiGLU MLP, grouped-query attention, no biases;
// buildable as any consecutive range of its blocks, like the zoo's gpt.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "stages/stage.h"

namespace skytrain::stages {

struct LlamaConfig {
  int vocabSize = 32000;
  int dModel = 768;
  int heads = 12;
  int kvHeads = 12;  // grouped-query attention: query heads share kvHeads key/value heads
  int layers = 12;
  int dFf = 2048;    // the SwiGLU MLP's hidden width (HF: intermediate_size)
  int seqLen = 2048;
  double ropeTheta = 10000.0;
  double normEps = 1e-5;
  // The output head is the input embedding's matrix. One stage holding both ends uses one
  // tensor; otherwise the last stage's "head.weight" starts as a copy of "tok_emb.weight"
  // and the runner keeps the two equal (their gradients summed every step).
  bool tieEmbeddings = false;
  bool recompute = false;  // activation recompute per block (stages/recompute.h)
  // A subspace model when > 0 (as GptConfig::subspaceRank, without a position table: the
  // positions are rotary): h = F + c Uᵀ, the token embedding's trainable part k wide, o and
  // down writing k numbers, k numbers a token at each cut.
  int subspaceRank = 0;
  // A learned code at each cut (as GptConfig::cutRank, the anchor a token table only).
  int cutRank = 0;
  std::vector<int> cuts;
  double senderLoss = 0;  // as GptConfig::senderLoss (its norm an RMSNorm)
};

// Stage holding blocks [firstLayer, lastLayer): the first also holds the token embedding
// (input: int64 ids [b, T]), the last the final norm and the head (output: logits [b, T, V]),
// the others map [b, T, d] to [b, T, d]. Parameters, by global name: tok_emb.weight,
// block<i>.{attn_norm,mlp_norm}.weight, block<i>.attn.{q,k,v,o}.weight,
// block<i>.mlp.{gate,up,down}.weight, norm.weight, head.weight. Each is drawn from (seed,
// its name) alone, so a stage has exactly the weights its range has in the whole model.
// Throws skytrain::Error on bad sizes or a bad range.
std::unique_ptr<Stage> makeLlamaStage(const LlamaConfig& config, int firstLayer, int lastLayer, uint64_t seed);

std::vector<int64_t> llamaInputShape(const LlamaConfig& config, int firstLayer, int64_t samples);
// Activation memory kept per in-flight sample for the backward (float32): per block about
// T (10 d + 4 d_ff + 2 heads T), plus the logits and their gradient on the last stage.
double llamaStashBytesPerSample(const LlamaConfig& config, int firstLayer, int lastLayer);
int64_t llamaParameterCount(const LlamaConfig& config, int firstLayer, int lastLayer);
void validateLlama(const LlamaConfig& config, int firstLayer, int lastLayer);

}  // namespace skytrain::stages
