// PipelineRunner: runs one stage of a job step by step, for one stage worker thread. It
// builds the stage's parts and drives them; each owns one thing:
//   StageLinks        frames in and out, checked, and the stream decoders (stage_links.h)
//   CodecSet          the codecs this stage encodes with (codec_set.h)
//   ScheduleExecutor  the F, B and W ops of the schedule (schedule_executor.h)
//   GradientPipeline  replica all-reduce, non-finite checks, global-norm clipping
//   UpdatePolicy      sync or delayed: when gradients reach the weights (update_policy.h)
//   Topology          chain or fan-in: how the stages are joined (topology.h)
//   Evaluation, Profiler, StageState   validation, the planner's measurements, checkpoints
// What a model kind needs at run time (masks, metrics, a fan-in's tokens) comes from the
// model source's objective (stages/objective.h): the runner names no model.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/net/peer_link.h"
#include "daemon/protocol/failures.h"
#include "daemon/protocol/spec/job_spec.h"
#include "daemon/stage/state/checkpoint.h"
#include "daemon/stage/runner/run_plan.h"
#include "daemon/stage/runner/stage_context.h"
#include "stages/weights/safetensors.h"
#include "stages/stage.h"

namespace torch::optim {
class Optimizer;
}

namespace skytrain::stages {
class DataSource;
class ModelSource;
class Objective;
}  // namespace skytrain::stages

namespace skytrain::protocol {
struct StageReport;
}

namespace skytrain::daemon {

class CodecSet;
class Evaluation;
class GradientPipeline;
class Profiler;
class ReplicaGroup;
class ScheduleExecutor;
class StageLinks;
class StageState;
struct StageFacts;
class Topology;
class UpdatePolicy;


struct StepStats {
  double loss = 0;            // mean over micro-batches (last stage only, else NaN)
  double lr = 0;              // the learning rate of the step
  bool skipped = false;       // a non-finite gradient: no update (on_nonfinite "skip", or loss scaling)
  double lossScale = 0;       // dynamic loss scaling: the scale after the step (0: off)
  int lead = -1;              // a fan-in producer: steps it ran ahead of the consumer (<= max_staleness)
  double stepSeconds = 0;     // wall time of the step on this stage
  double computeSeconds = 0;  // forward, backward, loss, optimizer and codec time
  double allReduceSeconds = 0;  // averaging the gradients over the stage's copies
  uint64_t bytesSent = 0;     // frame bytes this stage sent during the step
  uint64_t bytesRaw = 0;      // what the same tensors take uncompressed (float32 etc.)
  uint64_t bytesBackward = 0;  // the part of bytesSent sent to the previous stage (gradients)
  uint64_t rawBackward = 0;    // the part of bytesRaw sent to the previous stage
  std::map<int, double> codeShares;  // a learned code's share at each cut it decodes (Stage::codeShares)
  std::map<int, double> senderLosses;  // the own loss of each cut it sends from (Stage::takeSenderLosses)
};

// A step's figures into its report (kind Step): loss, times, bytes, learning rate, codes.
void addStepFields(const StepStats& stats, protocol::StageReport& report);

class PipelineRunner {
 public:
  // Builds the stage (weights from the job seed, then init_from files), the data source
  // when this stage reads data, the optimizer, the codecs and the parts. The plan starts as
  // the spec's fixed m and schedule when it has them (1 and 1f1b otherwise).
  //
  // A replicated stage's copy (job_spec.h) trains on its share of every batch: samples
  // [p * share, (p + 1) * share) of the full draw, share = batch_size / P, where P is the
  // number of pipelines that train (`pipelines`; empty: all R) and p this copy's place among
  // them. A plan's m counts micro-batches of a copy's share with all R training: with P, a
  // copy runs m * R / P of the same size (a healing job's survivors carry the whole batch).
  // Its device is the copy's placement's.
  PipelineRunner(const protocol::JobSpec& spec, int stage, uint64_t jobKey, double memoryBudgetBytes, int replica = 0,
                 std::vector<int> pipelines = {});
  ~PipelineRunner();

  // Links to the neighbours; null at the pipeline's ends (a fan-in producer: only next).
  void connect(std::unique_ptr<PeerLink> previous, std::unique_ptr<PeerLink> next);
  // A fan-in's consumer: a link to each producer, in stage order.
  void connectProducers(std::vector<std::unique_ptr<PeerLink>> producers);
  // The stage's copies (R > 1): gradients are averaged over them at each step's end.
  void setReplicaGroup(std::unique_ptr<ReplicaGroup> group);
  // Polled while waiting for frames; returning true throws Aborted.
  void setAbortCheck(std::function<bool()> check) { context_.aborted = std::move(check); }

  // A plan that names other codecs for "auto" directions replaces them.
  void setPlan(const RunPlan& plan);
  const RunPlan& plan() const { return plan_; }
  int microBatches() const;

  // `extras`: StageState::snapshot's (kept from an earlier step boundary; null: now's).
  StageSnapshot snapshot(const std::string& jobId, int64_t step,
                         const std::vector<std::pair<std::string, at::Tensor>>* extras = nullptr) const;
  // StageState::extras: what a snapshot holds beside the weights and AdamW's state, copied.
  std::vector<std::pair<std::string, at::Tensor>> extras() const;
  // Called before every optimizer step: the checkpoint writer's awaitReleased, so a
  // snapshot that borrows the weights is written before they change.
  void setUpdateFence(std::function<void()> fence) { updateFence_ = std::move(fence); }
  void restore(const StageSnapshot& snapshot);

  // Run by every stage at the same step boundary (profiler.h); {"compute", "link"}.
  nlohmann::json profile(uint64_t step);
  StepStats runStep(uint64_t step);
  // The update policy's boundaries (update_policy.h); nothing under the synchronous update.
  void drain();
  void flush();
  // Validation pass after `step`; the mean token loss on the last stage, else nullopt.
  std::optional<double> runEval(uint64_t step);
  // A classifier's accuracy / a translation's BLEU of the last runEval (the last stage).
  std::optional<double> evalAccuracy() const { return evalMetric("accuracy"); }
  std::optional<double> evalBleu() const { return evalMetric("bleu"); }

  bool isFirst() const { return context_.isFirst(); }
  bool isLast() const { return context_.isLast(); }
  bool fanIn() const { return fanIn_; }
  const stages::Stage& stage() const { return *model_; }
  // The stage's parameters as a pickled {name: tensor} dict (torch.load reads it).
  std::vector<char> serializedState() const;
  // The stage's parameters with global names (the final weights' safetensors file).
  stages::SafeTensors weights() const;

 private:
  std::optional<double> evalMetric(const std::string& name) const;
  // The stage with its initial weights on the stage's device, its trainable parameters
  // marked. With `facts`: the model itself — init_from files load into it, and its counts
  // and load report go to the profile; without: a working copy (the delayed update's).
  std::unique_ptr<stages::Stage> buildStage(StageFacts* facts);

  StageContext context_;
  StepCounters counters_;
  RunPlan plan_;
  bool fanIn_ = false;
  bool delayed_ = false;
  // ZeRO-1: per copy (rank), the parameters whose AdamW state and update it owns; empty
  // without sharding.
  std::vector<std::vector<at::Tensor>> shards_;
  void gatherShards();
  std::function<void()> updateFence_;
  std::unique_ptr<stages::ModelSource> source_;
  std::unique_ptr<stages::Stage> model_;
  std::unique_ptr<stages::DataSource> data_;      // null: this stage reads no data
  std::unique_ptr<stages::Objective> objective_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<CodecSet> codecs_;
  std::unique_ptr<StageLinks> links_;
  std::unique_ptr<ScheduleExecutor> executor_;
  std::unique_ptr<GradientPipeline> gradients_;
  std::unique_ptr<Evaluation> evaluation_;
  std::unique_ptr<Profiler> profiler_;
  std::unique_ptr<Topology> topology_;
  std::unique_ptr<UpdatePolicy> update_;
  std::unique_ptr<StageState> state_;
};

}  // namespace skytrain::daemon
