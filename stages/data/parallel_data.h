// ParallelDataSource: sentence pairs for translation. Each line of a file is
// "source<TAB>target" (a Spanish verse and the English verse of the same reference). A
// sample's inputs are the source's tokens, padded; its targets are [BOS] target [EOS],
// padded: a decoder reads them shifted right (teacher forcing) and predicts them shifted
// left. The special IDs are the model vocabulary's last three (stages/models/translation.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stages/data/text_data.h"

namespace skytrain::stages {

struct ParallelDataOptions {
  std::vector<std::string> files;
  std::vector<std::string> evalFiles;  // the validation (or test) pairs; empty: a held-out share of files
  std::string sentencepieceModel;      // empty: the byte tokenizer
  double validationFraction = 0.05;
  int seqLen = 64;    // source tokens at most seqLen, target tokens at most seqLen - 1
  int vocabSize = 0;  // the model's, which holds the tokenizer's IDs and the three specials
  uint64_t seed = 0;
};

class ParallelDataSource : public DataSource {
 public:
  // Reads and tokenizes every pair; a pair longer than seqLen on either side is skipped
  // (counted in skipped()). Throws skytrain::Error naming the file and line of a line
  // without a tab, when the vocabulary cannot hold the specials, and when a split is empty.
  explicit ParallelDataSource(ParallelDataOptions options);

  // inputs int64 [count, seqLen], targets int64 [count, seqLen + 1]. Training samples are
  // drawn from (seed, step, sample); validation sample i is the i-th pair (wrapping).
  TokenBatch trainBatch(uint64_t step, int firstSample, int count) const override;
  TokenBatch validationBatch(int firstSample, int count) const override;
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  // The target sentence of validation sample i, as the file has it (BLEU's reference).
  std::string validationReference(int sample) const;
  size_t trainSize() const { return train_.size(); }
  size_t validationSize() const { return validation_.size(); }
  size_t skipped() const { return skipped_; }

 private:
  struct Pair {
    std::vector<int32_t> source, target;
    std::string reference;  // the target text, kept for validation pairs only
  };
  std::vector<Pair> read(const std::vector<std::string>& files, bool keepText);
  TokenBatch gather(const std::vector<const Pair*>& pairs) const;

  ParallelDataOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<Pair> train_;
  std::vector<Pair> validation_;
  size_t skipped_ = 0;
};

}  // namespace skytrain::stages
