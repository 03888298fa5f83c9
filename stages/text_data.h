// TextDataSource: plain-text files tokenized into a train stream and a held-out
// validation tail, sampled so a batch depends only on (seed, step, sample index).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stages/tokenizer.h"

namespace skytrain::stages {

struct TextDataOptions {
  std::vector<std::string> files;
  std::string sentencepieceModel;  // empty: the byte tokenizer
  double validationFraction = 0.05;
  int seqLen = 64;
  uint64_t seed = 0;
};

struct TokenBatch {
  at::Tensor inputs;   // int64 [count, seqLen]
  at::Tensor targets;  // int64 [count, seqLen], inputs shifted by one token
};

class TextDataSource {
 public:
  // Reads and tokenizes every file; throws skytrain::Error naming the file that cannot be
  // read, or when a split is too short for one sequence.
  explicit TextDataSource(TextDataOptions options);

  // Samples [firstSample, firstSample + count) of training step `step`. Sample j of step s
  // starts at a position drawn from (seed, s, j) alone, so any micro-batch split of a step
  // sees the same sequences, and a resumed run sees the same data.
  TokenBatch trainBatch(uint64_t step, int firstSample, int count) const;

  // Validation samples [firstSample, firstSample + count): a fixed set for a given seed.
  TokenBatch validationBatch(int firstSample, int count) const;

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  size_t trainTokens() const { return train_.size(); }
  size_t validationTokens() const { return validation_.size(); }

 private:
  TokenBatch gather(const std::vector<int32_t>& tokens, uint64_t stream, int firstSample, int count) const;

  TextDataOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> train_;
  std::vector<int32_t> validation_;
};

}  // namespace skytrain::stages
