// Translation across two clouds (the source article's ABNet): an encoder stage turns
// source-language ids into its output [b, S, d] ("memory"), which crosses the link once a
// micro-batch (and its gradient back); a decoder stage, a causal LM whose blocks gain
// cross-attention over that memory, reads the target-language ids from its own data
// (teacher forcing) and decodes greedily for BLEU. Pretrained trunks load into both
// (init_from, by name under the prefixes "encoder." and "decoder.") and stay frozen while
// adapters and the cross-attention train.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "stages/models/gpt.h"
#include "stages/objective.h"
#include "stages/stage.h"

namespace skytrain::stages {

// The model vocabulary's last three IDs: [PAD] (also the pretrained encoder's [MASK]: the
// ID one past the tokenizer's), [BOS], [EOS].
constexpr int kTranslationSpecials = 3;
struct TranslationIds {
  int64_t pad = 0, bos = 0, eos = 0;
};
TranslationIds translationIds(int vocabSize);

constexpr const char* kEncoderPrefix = "encoder.";
constexpr const char* kDecoderPrefix = "decoder.";

// The encoder: a bidirectional stack over ids [b, S] ending in ln_f, no head; parameters
// "encoder.<the zoo's names>".
std::unique_ptr<Stage> makeTranslationEncoder(GptConfig config, uint64_t seed);

// The decoder: a causal stack with cross-attention in every block, over the ids of
// setTargets(targets [b, S + 1]) without their last column, attending to forward()'s input
// (memory [b, S_src, d]); its loss is cross-entropy against the targets without their first
// column, [PAD] ignored. generate() decodes greedily from [BOS] until [EOS] or maxTokens.
// Parameters "decoder.<the zoo's names>" (cross-attention: blockN.cross.*, blockN.ln_cross.*).
std::unique_ptr<Stage> makeTranslationDecoder(GptConfig config, uint64_t seed);

// The tokens of a generated row, up to its first [EOS], without specials.
std::vector<int32_t> generatedTokens(const at::Tensor& row, int vocabSize);

class ParallelDataSource;
// Translation's objective: the three specials past the tokenizer's vocabulary, and the
// corpus BLEU of the decoder's greedy translations of the validation samples against their
// references (translation_objective.cpp).
std::unique_ptr<Objective> makeTranslationObjective(const ParallelDataSource& data, int vocabSize, int seqLen);

}  // namespace skytrain::stages
