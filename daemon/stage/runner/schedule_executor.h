// ScheduleExecutor: the ops of one stage's schedule — F (a micro-batch's forward, and on the
// last stage its loss), B (its backward) and ZB-H1's W (a deferred weight-gradient pass) —
// on whichever copy of the stage the update policy hands it, with the frames they need.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "daemon/stage/runner/codec_set.h"
#include "daemon/stage/runner/stage_context.h"
#include "daemon/stage/runner/stage_links.h"
#include "scheduler/schedule.h"
#include "stages/models/model_source.h"
#include "stages/objective.h"
#include "stages/stage.h"
#include "stages/data/text_data.h"

namespace skytrain::daemon {

class LossScaler;

class ScheduleExecutor {
 public:
  // `data` is null on a stage that reads no data (a chain's middle).
  // `model` is the stage whose W passes run (ZB-H1 runs on it alone).
  ScheduleExecutor(const StageContext& context, StepCounters& counters, StageLinks& links, CodecSet& codecs,
                   const stages::ModelSource& source, stages::Stage& model, const stages::DataSource* data,
                   const stages::Objective& objective);

  void setSchedule(scheduler::Schedule schedule) { schedule_ = std::move(schedule); }
  // The last stage's losses are multiplied by this scaler's scale (dynamic loss scaling).
  void setLossScaler(const LossScaler& scaler) { scaler_ = &scaler; }
  const scheduler::Schedule& schedule() const { return schedule_; }
  int microBatchSize() const { return context_.spec.batchSize / schedule_.microBatches; }

  // The schedule's ops of `step` on `stage`, then the W passes still pending.
  void runStep(uint64_t step, stages::Stage& stage, double& lossSum);
  // F: micro-batch `microBatch` of `step` through `stage`; the last stage adds its loss.
  void forward(uint64_t step, int microBatch, stages::Stage& stage, double& lossSum);
  // B: its backward; the input's gradient goes to the previous stage.
  void backward(uint64_t step, int microBatch, stages::Stage& stage);

  // The batch of samples [firstSample, +count) as the first and last stage see it (the
  // objective's preparation), on the stage's device; empty where no data is read.
  stages::TokenBatch batch(const stages::TokenBatch& drawn, uint64_t stream, int64_t firstSample) const;
  // A batch's tensors on the stage's device.
  stages::TokenBatch onDevice(stages::TokenBatch batch) const;
  // The shape of what crosses into `stage` for `samples` sequences.
  std::vector<int64_t> boundaryShape(int stage, int64_t samples) const;

 private:
  // ZB-H1: the oldest pending micro-batch's W pass (its linear layers' weight gradients).
  void runWeightPass();

  const StageContext& context_;
  StepCounters& counters_;
  StageLinks& links_;
  CodecSet& codecs_;
  const stages::ModelSource& source_;
  stages::Stage& model_;
  const stages::DataSource* data_;
  const stages::Objective& objective_;
  scheduler::Schedule schedule_;
  std::map<int, at::Tensor> lossGradients_;  // last stage: d(loss/m)/d(logits) per micro-batch
  std::deque<int> pendingWeights_;           // ZB-H1: micro-batches whose W pass is due, oldest first
  const LossScaler* scaler_ = nullptr;       // null: the loss is not scaled
};

}  // namespace skytrain::daemon
