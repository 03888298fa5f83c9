// ELECTRA (Clark et al., 2020) on the zoo's encoder: a generator per producer stage learns
// masked-language modelling and replaces the masked tokens with its own samples; the
// discriminator (the consumer) learns which tokens were replaced. Only token IDs and their
// replaced flags cross between them: nothing flows back.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

#include "stages/objective.h"

namespace skytrain::stages {

// BERT's masking, reproducible per sample: each position of sample `firstSample + i` of
// step `step` is chosen with probability `rate` by a generator seeded from (seed, step,
// sample) alone; of the chosen, 80% become maskId, 10% a random token below vocab, 10%
// stay. targets holds the original token at chosen positions and -100 (ignored by the
// cross-entropy) elsewhere.
struct MaskedTokens {
  at::Tensor inputs;   // int64 [b, T]
  at::Tensor targets;  // int64 [b, T]
};
MaskedTokens maskTokens(const at::Tensor& ids, uint64_t seed, uint64_t step, int64_t firstSample, int64_t maskId,
                        int64_t vocab, double rate = 0.15);

// The generator's replacement: at each chosen position (targets != -100) a token sampled
// from softmax(logits) (per-sample generators, seeded as above), elsewhere the original.
// Returns int64 [b, T, 2]: the corrupted sequence and its replaced flags (1 where the token
// differs from the original; a sample equal to the original counts as not replaced). The
// logits may cover more than vocab outputs; only the first vocab are sampled from.
at::Tensor replaceTokens(const at::Tensor& original, const at::Tensor& logits, const at::Tensor& targets, uint64_t seed,
                         uint64_t step, int64_t firstSample, int64_t vocab);

// The discriminator's loss: binary cross-entropy of its logits [b, T, 1] against the
// replaced flags [b, T] (mean over tokens).
at::Tensor replacedTokenLoss(const at::Tensor& logits, const at::Tensor& replaced);

// ELECTRA's objective on a fan-in (objective.cpp): a producer masks its batch,
// learns masked-language modelling, and sends replaceTokens' [b, T, 2]; the consumer learns
// the replaced flags of the corrupted sequence. [MASK] is the ID one past the tokenizer's
// `vocab` IDs (0 on the consumer, which reads no data).
std::unique_ptr<Objective> makeElectraObjective(int64_t vocab, uint64_t seed, double maskRate);

}  // namespace skytrain::stages
