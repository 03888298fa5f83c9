// A GPT-style causal language model, buildable as any consecutive range of its blocks.
#pragma once

#include <cstdint>
#include <memory>

#include "stages/stage.h"

namespace skytrain::stages {

struct GptConfig {
  int vocabSize = 256;
  int dModel = 128;
  int heads = 4;
  int layers = 4;  // transformer blocks
  int dFf = 512;
  int seqLen = 64;
  double dropout = 0.0;
};

// Stage holding blocks [firstLayer, lastLayer). The stage with firstLayer == 0 also holds
// the token and position embeddings (its input is token ids [b, T]); the one with
// lastLayer == layers holds the final norm and the LM head (its output is logits
// [b, T, vocab]); the others map [b, T, d] to [b, T, d]. Every parameter is initialised
// from (seed, its global name) alone, so a stage has exactly the weights that range has in
// the unsplit model built with the same seed. Throws skytrain::Error on a bad range.
std::unique_ptr<Stage> makeGptStage(const GptConfig& config, int firstLayer, int lastLayer,
                                    uint64_t seed);

// Parameter count of blocks [firstLayer, lastLayer) with the embeddings/head they hold.
int64_t gptParameterCount(const GptConfig& config, int firstLayer, int lastLayer);

}  // namespace skytrain::stages
