// Translation's objective (translation.h): validation decodes greedily and scores corpus
// BLEU against the parallel corpus's references.
#include <torch/torch.h>

#include "stages/bleu.h"
#include "stages/data/parallel_data.h"
#include "stages/models/translation.h"

namespace skytrain::stages {
namespace {

class Translation : public Objective {
 public:
  Translation(const ParallelDataSource& data, int vocabSize, int seqLen)
      : data_(data), vocabSize_(vocabSize), seqLen_(seqLen) {}

  int extraTokens() const override { return kTranslationSpecials; }
  std::string extraTokensName() const override { return " plus [PAD], [BOS], [EOS]"; }
  void beginEval() override {
    hypotheses_.clear();
    references_.clear();
  }
  // The memory the decoder took in is what it decodes from.
  void addEval(Stage& stage, const at::Tensor& memory, const at::Tensor&, const TokenBatch&,
               int64_t firstSample) override {
    const at::Tensor generated = stage.generate(memory, seqLen_);
    for (int64_t i = 0; i < generated.size(0); ++i) {
      hypotheses_.push_back(data_.tokenizer().decode(generatedTokens(generated[i], vocabSize_)));
      references_.push_back(data_.validationReference(static_cast<int>(firstSample + i)));
    }
  }
  std::map<std::string, double> evalMetrics() const override {
    return {{"bleu", corpusBleu(hypotheses_, references_).score}};
  }

 private:
  const ParallelDataSource& data_;
  int vocabSize_, seqLen_;
  std::vector<std::string> hypotheses_, references_;
};

}  // namespace

std::unique_ptr<Objective> makeTranslationObjective(const ParallelDataSource& data, int vocabSize, int seqLen) {
  return std::make_unique<Translation>(data, vocabSize, seqLen);
}

}  // namespace skytrain::stages
