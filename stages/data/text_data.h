// TextDataSource: plain-text files tokenized into a train stream and a held-out
// validation tail, sampled so a batch depends only on (seed, step, sample index).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stages/tokens/tokenizer.h"

namespace skytrain::stages {

struct TextDataOptions {
  std::vector<std::string> files;
  std::vector<std::string> evalFiles;  // validation from these instead of the held-out tail
  std::string sentencepieceModel;  // empty: the byte tokenizer
  double validationFraction = 0.05;
  int seqLen = 64;
  uint64_t seed = 0;
};

struct TokenBatch {
  at::Tensor inputs;   // int64 [count, seqLen]
  at::Tensor targets;  // int64 [count, seqLen], inputs shifted by one token (labelled text: [count] classes)
};

// What a stage reads: batches drawn from (seed, step, sample index) alone, so any
// micro-batch split of a step sees the same samples and a resumed run the same data.
class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual TokenBatch trainBatch(uint64_t step, int firstSample, int count) const = 0;
  virtual TokenBatch validationBatch(int firstSample, int count) const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  // Identifies what the source reads, for checkpoints to record (empty: not recorded).
  virtual std::string fingerprint() const { return ""; }
};

class TextDataSource : public DataSource {
 public:
  // Reads and tokenizes every file; throws skytrain::Error naming the file that cannot be
  // read, or when a split is too short for one sequence.
  explicit TextDataSource(TextDataOptions options);

  // Samples [firstSample, firstSample + count) of training step `step`. Sample j of step s
  // starts at a position drawn from (seed, s, j) alone, so any micro-batch split of a step
  // sees the same sequences, and a resumed run sees the same data.
  TokenBatch trainBatch(uint64_t step, int firstSample, int count) const override;

  // Validation samples [firstSample, firstSample + count): a fixed set for a given seed.
  TokenBatch validationBatch(int firstSample, int count) const override;

  const Tokenizer& tokenizer() const override { return *tokenizer_; }
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
