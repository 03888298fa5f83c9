// LabelledDataSource: labelled text for classification. Each line of a file is
// "label<TAB>text"; a sample is the text's first seq_len tokens (padded with the ID one
// past the tokenizer's vocabulary) and its label's index in `classes`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stages/data/text_data.h"

namespace skytrain::stages {

struct LabelledDataOptions {
  std::vector<std::string> files;
  std::vector<std::string> evalFiles;  // the validation set (another language: zero-shot); empty: a held-out share of files
  std::vector<std::string> classes;    // every label, in class-index order
  std::string sentencepieceModel;      // empty: the byte tokenizer
  double validationFraction = 0.05;
  int seqLen = 64;
  uint64_t seed = 0;
};

class LabelledDataSource : public DataSource {
 public:
  // Reads and tokenizes every line. Throws skytrain::Error naming the file and line of a
  // line without a tab or with a label not in `classes`, and when a split is empty.
  explicit LabelledDataSource(LabelledDataOptions options);

  // targets: int64 [count], class indices. Training samples are drawn from (seed, step,
  // sample); validation sample i is the i-th example of the validation set (wrapping).
  TokenBatch trainBatch(uint64_t step, int firstSample, int count) const override;
  TokenBatch validationBatch(int firstSample, int count) const override;
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  size_t trainSize() const { return train_.size(); }
  size_t validationSize() const { return validation_.size(); }

 private:
  struct Example {
    std::vector<int32_t> tokens;
    int label = 0;
  };
  std::vector<Example> read(const std::vector<std::string>& files) const;
  TokenBatch gather(const std::vector<const Example*>& examples) const;

  LabelledDataOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<Example> train_;
  std::vector<Example> validation_;
};

}  // namespace skytrain::stages
