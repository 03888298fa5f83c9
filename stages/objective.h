// Objective: what a model kind does with the data around its stages at run time — the batch
// a stage sees (BERT's masks), the token IDs it adds past the tokenizer's, the metrics of a
// validation pass, and on a fan-in what a producer sends and the consumer learns from. The
// runner names no model kind: it asks the model source for its objective (model_source.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "stages/data/text_data.h"

namespace skytrain::stages {

class Stage;

// The stream validation draws its masks from: the same at every evaluation.
constexpr uint64_t kValidationStream = ~uint64_t{0};

class Objective {
 public:
  virtual ~Objective() = default;

  // Token IDs past the tokenizer's vocabulary that the model's vocab_size must hold, and
  // how an error names them (" plus the [MASK] token"); 0 and "" for none.
  virtual int extraTokens() const { return 0; }
  virtual std::string extraTokensName() const { return ""; }

  // The batch of samples [firstSample, firstSample + count) that the first and the last
  // stage see, drawn from `stream` (a step, or kValidationStream): a masked model's masked
  // inputs and its targets only where masked. Depends on (seed, stream, sample) alone, so
  // the first and the last stage draw the same.
  virtual TokenBatch prepare(TokenBatch batch, uint64_t stream, int64_t firstSample) const { return batch; }

  // Validation on the last stage beyond the loss: begin, a chunk at a time (the stage, what
  // it took in, what it gave out, the chunk's batch and its first sample), then the metrics
  // by name ("accuracy", "bleu").
  virtual void beginEval() {}
  virtual void addEval(Stage& stage, const at::Tensor& input, const at::Tensor& output, const TokenBatch& batch,
                       int64_t firstSample) {}
  virtual std::map<std::string, double> evalMetrics() const { return {}; }

  // A fan-in producer: what it sends the consumer after its own forward, from the batch as
  // drawn, the batch it prepared, and its output. Throws skytrain::Error on a chain's model.
  virtual at::Tensor produce(const TokenBatch& drawn, const TokenBatch& prepared, const at::Tensor& output,
                             uint64_t stream, int64_t firstSample) const;
  // A fan-in consumer: the inputs and targets in what a producer sent.
  virtual TokenBatch consume(const at::Tensor& received) const;
};

// Next-token prediction: the batch as drawn, no metric but the loss.
std::unique_ptr<Objective> makeLanguageModelObjective();
// BERT's masked-language modelling (electra.h's maskTokens) over a tokenizer of `vocab` IDs:
// [MASK] is the ID one past them.
std::unique_ptr<Objective> makeMaskedLanguageModelObjective(int64_t vocab, uint64_t seed, double maskRate);
// A classifier over labelled text: its padding ID past the tokenizer's, accuracy of the
// sequence-averaged logits.
std::unique_ptr<Objective> makeClassificationObjective();

}  // namespace skytrain::stages
