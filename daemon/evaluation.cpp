// Validation passes of a chain: each stage's inference on the validation samples, the last
// stage's loss, a classifier's accuracy and a translation's BLEU (greedy decoding).
#include <torch/torch.h>

#include "compression/side_tokens.h"
#include "daemon/pipeline_runner.h"
#include "stages/bleu.h"
#include "stages/parallel_data.h"
#include "stages/translation.h"

namespace skytrain::daemon {

using compression::FrameDirection;

std::optional<double> PipelineRunner::runEval(uint64_t step) {
  if (fanIn_) return fanInEval(step);
  const int b = spec_.batchSize / schedule_.microBatches;
  const int samples = spec_.eval.samples;
  double lossSum = 0, correct = 0;
  int64_t tokens = 0;
  const bool classifier = spec_.model.kind == "classifier";
  const bool translation = spec_.model.kind == "translation";
  std::vector<std::string> hypotheses, references;
  // A codec that learns from its messages ("+pred") starts each validation pass from the
  // training stream's state and leaves that state as it was, at both ends of the link.
  if (compression::needsTokens(steadyForward_)) {
    if (next_) evalCodec_->loadState(steady_.forward->state());
    if (previous_) {
      streamDecoder(FrameDirection::Eval, steadyForward_)
          .loadState(streamDecoder(FrameDirection::Forward, steadyForward_).state());
    }
  }
  for (int chunk = 0; chunk * b < samples; ++chunk) {
    const int count = std::min(b, samples - chunk * b);
    stages::TokenBatch batch;
    if (data_) batch = onDevice(masked(data_->validationBatch(chunk * b, count), kEvalMaskStream, chunk * b));
    const at::Tensor input =
        isFirst() ? batch.inputs
                  : receive(*previous_, FrameDirection::Eval, step, chunk, boundaryShape(stage_, count), batch.inputs);
    if (isLast() && data_) model_->setTargets(batch.targets);
    const at::Tensor output = model_->infer(input);
    if (isLast()) {
      torch::NoGradGuard noGrad;
      lossSum += model_->loss(output, batch.targets).item<double>() * static_cast<double>(batch.targets.numel());
      tokens += batch.targets.numel();
      if (classifier) correct += output.mean(1).argmax(-1).eq(batch.targets).sum().item<double>();
      if (translation) translate(input, chunk * b, hypotheses, references);
    } else {
      transmit(*next_, *evalCodec_, FrameDirection::Eval, step, chunk, stage_ + 1, output, batch.inputs);
    }
  }
  if (!isLast()) return std::nullopt;
  if (classifier) evalAccuracy_ = correct / static_cast<double>(tokens);
  if (translation) evalBleu_ = stages::corpusBleu(hypotheses, references).score;
  return lossSum / static_cast<double>(tokens);
}

void PipelineRunner::translate(const at::Tensor& memory, int firstSample, std::vector<std::string>& hypotheses,
                               std::vector<std::string>& references) {
  const auto& parallel = dynamic_cast<const stages::ParallelDataSource&>(*data_);
  const at::Tensor generated = model_->generate(memory, spec_.model.seqLen);
  for (int64_t i = 0; i < generated.size(0); ++i) {
    hypotheses.push_back(data_->tokenizer().decode(stages::generatedTokens(generated[i], spec_.model.vocabSize)));
    references.push_back(parallel.validationReference(firstSample + static_cast<int>(i)));
  }
}

}  // namespace skytrain::daemon
