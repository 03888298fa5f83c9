// Objectives (stages/objective.h): what each model kind does with the data around its
// stages, as the runner asks for it — checked against the functions they stand for.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "stages/models/electra.h"
#include "stages/models/model_source.h"
#include "stages/objective.h"

using namespace skytrain::stages;

namespace {

ModelConfig config(const std::string& kind, int stages) {
  ModelConfig c;
  c.kind = kind;
  c.gpt.vocabSize = 64;
  c.gpt.dModel = 32;
  c.gpt.heads = 4;
  c.gpt.layers = 2;
  c.gpt.dFf = 64;
  c.gpt.seqLen = 12;
  c.generator = c.gpt;
  c.classes = 3;
  c.seed = 9;
  c.maskRate = 0.3;
  for (int s = 0; s < stages; ++s) c.stages.push_back({s, s + 1, "", {}});
  return c;
}

// Byte-level text: what a first or last stage reads.
class ByteData : public DataSource {
 public:
  TokenBatch trainBatch(uint64_t, int, int) const override { return {}; }
  TokenBatch validationBatch(int, int) const override { return {}; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }

 private:
  std::unique_ptr<Tokenizer> tokenizer_ = makeByteTokenizer();
};

}  // namespace

TEST_CASE("every zoo kind gives an objective, with the token IDs it adds past the tokenizer's") {
  const std::string kind = GENERATE(as<std::string>{}, "gpt", "encoder", "classifier", "electra");
  CAPTURE(kind);
  const auto source = makeModelSource(config(kind, 2));
  const ByteData data;
  const auto objective = source->objective(&data);
  REQUIRE(objective);
  const int extra = kind == "gpt" ? 0 : 1;
  CHECK(objective->extraTokens() == extra);
  CHECK(objective->extraTokensName() == (extra ? " plus the [MASK] token" : ""));
  // A stage that reads no data (a chain's middle, a fan-in's consumer) gets one too.
  CHECK(source->objective(nullptr));
}

TEST_CASE("a masked model's batch is BERT's masks, the same for the same (seed, stream, sample)") {
  const auto objective = makeMaskedLanguageModelObjective(60, 9, 0.3);
  const at::Tensor ids = torch::randint(0, 60, {4, 12}, torch::kLong);
  const TokenBatch prepared = objective->prepare({ids, ids}, 7, 2);
  const MaskedTokens expected = maskTokens(ids, 9, 7, 2, 60, 60, 0.3);
  CHECK(torch::equal(prepared.inputs, expected.inputs));
  CHECK(torch::equal(prepared.targets, expected.targets));
  CHECK_FALSE(torch::equal(prepared.inputs, ids));  // 30% of 48 positions: some are masked
  CHECK(torch::equal(objective->prepare({ids, ids}, kValidationStream, 2).inputs,
                     objective->prepare({ids, ids}, kValidationStream, 2).inputs));
}

TEST_CASE("next-token prediction leaves the batch as drawn and is no fan-in") {
  const auto objective = makeLanguageModelObjective();
  const at::Tensor ids = torch::randint(0, 60, {2, 12}, torch::kLong);
  CHECK(torch::equal(objective->prepare({ids, ids}, 3, 0).inputs, ids));
  CHECK_THROWS(objective->consume(torch::zeros({2, 12, 2}, torch::kLong)));
}

TEST_CASE("ELECTRA's producer sends replaceTokens' output, which the consumer splits") {
  const auto objective = makeElectraObjective(60, 9, 0.3);
  const at::Tensor ids = torch::randint(0, 60, {2, 12}, torch::kLong);
  const TokenBatch drawn{ids, ids};
  const TokenBatch prepared = objective->prepare(drawn, 4, 6);
  const at::Tensor logits = torch::randn({2, 12, 61});
  const at::Tensor sent = objective->produce(drawn, prepared, logits, 4, 6);
  CHECK(torch::equal(sent, replaceTokens(ids, logits, prepared.targets, 9, 4, 6, 60)));
  const TokenBatch received = objective->consume(sent);
  CHECK(torch::equal(received.inputs, sent.select(-1, 0)));
  CHECK(torch::equal(received.targets, sent.select(-1, 1)));
}

TEST_CASE("a classifier's metric is the accuracy of its sequence-averaged logits") {
  const auto objective = makeClassificationObjective();
  objective->beginEval();
  // Two samples, three classes: the mean over the sequence picks class 2, then class 0.
  const at::Tensor output = torch::tensor({{{0.f, 0.f, 1.f}, {0.f, 0.f, 1.f}}, {{1.f, 0.f, 0.f}, {0.f, 0.5f, 0.f}}});
  auto stage = makeModelSource(config("classifier", 1))->build(0);
  objective->addEval(*stage, at::Tensor(), output, {at::Tensor(), torch::tensor({2, 1})}, 0);
  CHECK(objective->evalMetrics().at("accuracy") == Approx(0.5));
}
