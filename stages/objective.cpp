// The objectives of the zoo's trunk (objective.h): next-token prediction, masked-language
// modelling, ELECTRA's (declared in electra.h) and classification. Translation's is in
// translation_objective.cpp.
#include "stages/objective.h"

#include <torch/torch.h>

#include "scheduler/error.h"
#include "stages/models/electra.h"

namespace skytrain::stages {

at::Tensor Objective::produce(const TokenBatch&, const TokenBatch&, const at::Tensor&, uint64_t, int64_t) const {
  throw Error("this model is not a fan-in: it has no producer stages");
}

TokenBatch Objective::consume(const at::Tensor&) const {
  throw Error("this model is not a fan-in: it has no consumer stage");
}

namespace {

class LanguageModel : public Objective {};

class MaskedLanguageModel : public Objective {
 public:
  MaskedLanguageModel(int64_t vocab, uint64_t seed, double maskRate) : vocab_(vocab), seed_(seed), maskRate_(maskRate) {}

  int extraTokens() const override { return 1; }
  std::string extraTokensName() const override { return " plus the [MASK] token"; }
  TokenBatch prepare(TokenBatch batch, uint64_t stream, int64_t firstSample) const override {
    auto m = maskTokens(batch.inputs, seed_, stream, firstSample, /*maskId=*/vocab_, vocab_, maskRate_);
    return {std::move(m.inputs), std::move(m.targets)};
  }

 protected:
  int64_t vocab_;
  uint64_t seed_;
  double maskRate_;
};

// ELECTRA (electra.h): each producer masks as BERT does and sends its generator's
// replacements with their flags; the consumer learns the flags.
class Electra : public MaskedLanguageModel {
 public:
  using MaskedLanguageModel::MaskedLanguageModel;
  at::Tensor produce(const TokenBatch& drawn, const TokenBatch& prepared, const at::Tensor& logits, uint64_t stream,
                     int64_t firstSample) const override {
    return replaceTokens(drawn.inputs, logits, prepared.targets, seed_, stream, firstSample, vocab_);
  }
  TokenBatch consume(const at::Tensor& received) const override { return {received.select(-1, 0), received.select(-1, 1)}; }
};

class Classification : public Objective {
 public:
  int extraTokens() const override { return 1; }  // the padding ID
  std::string extraTokensName() const override { return " plus the [MASK] token"; }
  void beginEval() override { correct_ = samples_ = 0; }
  void addEval(Stage&, const at::Tensor&, const at::Tensor& output, const TokenBatch& batch, int64_t) override {
    correct_ += output.mean(1).argmax(-1).eq(batch.targets).sum().item<double>();
    samples_ += static_cast<double>(batch.targets.numel());
  }
  std::map<std::string, double> evalMetrics() const override { return {{"accuracy", correct_ / samples_}}; }

 private:
  double correct_ = 0, samples_ = 0;
};

}  // namespace

std::unique_ptr<Objective> makeLanguageModelObjective() { return std::make_unique<LanguageModel>(); }

std::unique_ptr<Objective> makeMaskedLanguageModelObjective(int64_t vocab, uint64_t seed, double maskRate) {
  return std::make_unique<MaskedLanguageModel>(vocab, seed, maskRate);
}

std::unique_ptr<Objective> makeElectraObjective(int64_t vocab, uint64_t seed, double maskRate) {
  return std::make_unique<Electra>(vocab, seed, maskRate);
}

std::unique_ptr<Objective> makeClassificationObjective() { return std::make_unique<Classification>(); }

}  // namespace skytrain::stages
