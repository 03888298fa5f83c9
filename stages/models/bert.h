// BERT's exact layout (Devlin et al. 2019, as Hugging Face's BertModel computes it), the
// `encoder` and `classifier` kinds' `"layout": "bert"`: word + position + token-type
// embeddings under a LayerNorm, post-norm blocks (LayerNorm after each residual sum), exact
// GELU, biases everywhere; on top the masked-LM head (dense, GELU, LayerNorm, a decoder
// tied to the word embeddings, its own bias) or a classifier over labels. Buildable as any
// consecutive range of its blocks, so a BERT checkpoint loads into stages cut anywhere.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "stages/stage.h"

namespace skytrain::stages {

struct BertConfig {
  int vocabSize = 30522;
  int dModel = 768;
  int heads = 12;
  int layers = 12;
  int dFf = 3072;
  int seqLen = 512;
  int positions = 512;  // rows of the position table (max_position_embeddings)
  int typeVocab = 2;    // token types (segments); every token of skytrain's data is type 0
  double normEps = 1e-12;
  int outputs = 0;      // 0: the masked-LM head over the vocabulary; > 0: a classifier
};

// Stage holding blocks [firstLayer, lastLayer). Parameters, by global name: tok_emb,
// pos_emb, type_emb (.weight), emb_ln; block<i>.attn.{q,k,v,o}, block<i>.ln1,
// block<i>.fc, block<i>.proj, block<i>.ln2 (.weight, .bias); the MLM head mlm.dense,
// mlm.ln, mlm.bias and — when the stage does not hold the embeddings — head.weight, a copy
// of tok_emb.weight kept equal by the runner (ModelSource::tied); or classifier.{weight,bias}.
// `loss`: the last stage's loss (empty: token cross-entropy).
std::unique_ptr<Stage> makeBertStage(const BertConfig& config, int firstLayer, int lastLayer, uint64_t seed,
                                     std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss = {});

std::vector<int64_t> bertInputShape(const BertConfig& config, int firstLayer, int64_t samples);
double bertStashBytesPerSample(const BertConfig& config, int firstLayer, int lastLayer);
int64_t bertParameterCount(const BertConfig& config, int firstLayer, int lastLayer);

}  // namespace skytrain::stages
