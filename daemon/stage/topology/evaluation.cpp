#include "daemon/stage/topology/evaluation.h"

#include <torch/torch.h>

#include "compression/side_tokens.h"
#include "daemon/stage/runner/codec_set.h"
#include "daemon/stage/runner/schedule_executor.h"
#include "daemon/stage/runner/stage_links.h"
#include "stages/objective.h"

namespace skytrain::daemon {

using compression::FrameDirection;

Evaluation::Evaluation(const StageContext& context, StageLinks& links, CodecSet& codecs, ScheduleExecutor& executor,
                       stages::Stage& model, const stages::DataSource* data, stages::Objective& objective)
    : context_(context),
      links_(links),
      codecs_(codecs),
      executor_(executor),
      model_(model),
      data_(data),
      objective_(objective) {}

std::optional<double> Evaluation::run(uint64_t step) {
  const int b = executor_.microBatchSize();
  const int samples = context_.spec.eval.samples;
  const bool last = context_.isLast();
  double lossSum = 0;
  int64_t tokens = 0;
  if (last) objective_.beginEval();
  // A codec that learns from its messages ("+pred") starts each validation pass from the
  // training stream's state and leaves that state as it was, at both ends of the link.
  const std::string& forward = codecs_.forwardSpec();
  if (compression::needsTokens(forward)) {
    if (links_.hasNext()) codecs_.eval().loadState(codecs_.steadyForward().state());
    if (links_.hasPrevious()) {
      links_.streamDecoder(FrameDirection::Eval, forward).loadState(links_.streamDecoder(FrameDirection::Forward, forward).state());
    }
  }
  for (int chunk = 0; chunk * b < samples; ++chunk) {
    const int count = std::min(b, samples - chunk * b);
    stages::TokenBatch batch;
    if (data_) batch = executor_.batch(data_->validationBatch(chunk * b, count), stages::kValidationStream, chunk * b);
    const at::Tensor input = context_.isFirst()
                                 ? batch.inputs
                                 : links_.receive(links_.previous(), FrameDirection::Eval, step, chunk,
                                                  executor_.boundaryShape(context_.stage, count), batch.inputs);
    if (last && data_) model_.setTargets(batch.targets);
    if (data_) model_.setTokens(batch.inputs);
    const at::Tensor output = model_.infer(input);
    if (last) {
      torch::NoGradGuard noGrad;
      lossSum += model_.loss(output, batch.targets).item<double>() * static_cast<double>(batch.targets.numel());
      tokens += batch.targets.numel();
      objective_.addEval(model_, input, output, batch, chunk * b);
    } else {
      links_.transmit(links_.next(), codecs_.eval(), FrameDirection::Eval, step, chunk,
                      static_cast<uint16_t>(context_.stage + 1), output, batch.inputs);
    }
  }
  if (!last) return std::nullopt;
  metrics_ = objective_.evalMetrics();
  return lossSum / static_cast<double>(tokens);
}

}  // namespace skytrain::daemon
