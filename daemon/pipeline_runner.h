// PipelineRunner: runs one stage of a job step by step — the schedule's forward and
// backward ops, frames to and from the neighbours, the loss on the last stage, the
// synchronous AdamW step — and validation passes. Used by one stage worker thread.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <deque>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "compression/codec.h"
#include "daemon/checkpoint.h"
#include "daemon/model_setup.h"
#include "daemon/peer_link.h"
#include "daemon/protocol/job_spec.h"
#include "scheduler/schedule.h"
#include "stages/gpt.h"
#include "stages/model_source.h"
#include "stages/stage.h"
#include "stages/text_data.h"
#include "stages/weights.h"

namespace torch::optim {
class Optimizer;
}

namespace skytrain::daemon {

class ReplicaGroup;

// Starts a stage's failure message when a loss or gradient is NaN or Inf: the job fails
// (a restart would meet it again).
constexpr const char* kNonFinite = "non-finite: ";
// Starts a stage's failure message when its model cannot be built (a bad TorchScript
// module, a wrong shape): the job fails, for a restart would meet it again.
constexpr const char* kBadModel = "bad model: ";
constexpr size_t kMaxInitBytes = size_t{1} << 40;  // one init_from file

struct StepStats {
  double loss = 0;            // mean over micro-batches (last stage only, else NaN)
  double lr = 0;              // the learning rate of the step
  bool skipped = false;       // a non-finite gradient: no update (on_nonfinite "skip")
  int lead = -1;              // a fan-in producer: steps it ran ahead of the consumer (<= max_staleness)
  double stepSeconds = 0;     // wall time of the step on this stage
  double computeSeconds = 0;  // forward, backward, loss, optimizer and codec time
  double allReduceSeconds = 0;  // averaging the gradients over the stage's copies
  uint64_t bytesSent = 0;     // frame bytes this stage sent during the step
  uint64_t bytesRaw = 0;      // what the same tensors take uncompressed (float32 etc.)
  uint64_t bytesBackward = 0;  // the part of bytesSent sent to the previous stage (gradients)
  uint64_t rawBackward = 0;    // the part of bytesRaw sent to the previous stage
};

// One codec per direction: codecs keep per-stream state (error feedback).
struct CodecPair {
  std::unique_ptr<compression::Codec> forward;
  std::unique_ptr<compression::Codec> backward;
};

// Thrown out of a wait when the worker is told to stop.
struct Aborted {};


// What the coordinator's planner chose: applied from the next step on.
struct RunPlan {
  int microBatches = 1;
  scheduler::ScheduleKind schedule = scheduler::ScheduleKind::OneFOneB;
  std::vector<int> warmups;  // per stage, for 1f1b-delay
  // The codecs this stage encodes with, when the spec says "auto": forward to the next
  // stage, backward to the previous one. Empty: the spec's (or "none" before any plan).
  std::string forwardCodec, backwardCodec;
};

class PipelineRunner {
 public:
  // Builds the stage (weights from the job seed), the data source when this stage needs
  // tokens (first: inputs, last: targets), the optimizer and the codecs. The plan starts as
  // the spec's fixed m and schedule when it has them (1 and 1f1b otherwise).
  //
  // A replicated stage's copy (job_spec.h) trains on its share of every batch: samples
  // [replica * share, (replica + 1) * share) of the full draw, share = batch_size / R; the
  // runner's spec_.batchSize is that share. Its device is the copy's placement's.
  PipelineRunner(const protocol::JobSpec& spec, int stage, uint64_t jobKey, double memoryBudgetBytes, int replica = 0);
  ~PipelineRunner();

  // Links to the neighbours; null at the pipeline's ends (a fan-in producer: only next).
  void connect(std::unique_ptr<PeerLink> previous, std::unique_ptr<PeerLink> next);
  // A fan-in's consumer: a link to each producer, in stage order; their frames arrive in one
  // queue, told apart by the producer index in the high 16 bits of the micro-batch.
  void connectProducers(std::vector<std::unique_ptr<PeerLink>> producers);
  // The stage's copies (R > 1): gradients are averaged over them at each step's end,
  // before clipping and the optimizer; the profile times that all-reduce.
  void setReplicaGroup(std::unique_ptr<ReplicaGroup> group);
  // Polled while waiting for frames; returning true throws Aborted.
  void setAbortCheck(std::function<bool()> check) { aborted_ = std::move(check); }

  // A plan that names other codecs for "auto" directions replaces them (fresh error-feedback
  // state: the residual of one codec means nothing to another).
  void setPlan(const RunPlan& plan);
  const RunPlan& plan() const { return plan_; }
  int microBatches() const { return schedule_.microBatches; }

  // Checkpoints (runner_state.cpp), at a step boundary: a copy of everything the run's
  // future depends on — parameters, AdamW state, codec state, the CPU RNG, the plan — and
  // its restoration, which checks every tensor's name, shape and dtype.
  StageSnapshot snapshot(const std::string& jobId, int64_t step) const;
  void restore(const StageSnapshot& snapshot);

  // Profiling (profiler.cpp), run by every stage at the same step boundary: compute times
  // and frame bytes at a few micro-batch sizes through the job's codecs, then the links —
  // echoing the previous stage's probes, then probing the next stage with real frames.
  // Returns {"compute": ..., "link": ... (to the next stage, null on the last)}.
  nlohmann::json profile(uint64_t step);

  StepStats runStep(uint64_t step);
  // The delayed update (delayed_update.cpp) at a boundary that every stage reaches at the
  // same step (a checkpoint, a validation, a profile): drain() runs the backwards the last
  // round deferred and learns every pending gradient's global norm, so no frame of the
  // step stays in flight; the pending gradients stay pending (the update's arithmetic does
  // not depend on where boundaries fall). flush() drains, then applies them: the job's end.
  // Both do nothing under the synchronous update.
  void drain();
  void flush();
  // Validation pass after `step`; the mean token loss on the last stage, else nullopt.
  std::optional<double> runEval(uint64_t step);
  // A classifier's validation accuracy of the last runEval (the last stage); else nullopt.
  std::optional<double> evalAccuracy() const {
    return evalAccuracy_ >= 0 ? std::optional<double>(evalAccuracy_) : std::nullopt;
  }

  // A translation's corpus BLEU (greedy decoding) of the last runEval (the last stage).
  std::optional<double> evalBleu() const { return evalBleu_ >= 0 ? std::optional<double>(evalBleu_) : std::nullopt; }

  bool isFirst() const { return stage_ == 0; }
  bool isLast() const { return stage_ == static_cast<int>(spec_.stages.size()) - 1; }
  bool fanIn() const { return fanIn_; }
  const stages::Stage& stage() const { return *model_; }
  // The stage's parameters as a pickled {name: tensor} dict (torch.load reads it).
  std::string serializedState() const;
  // The stage's parameters with global names (the final weights' safetensors file).
  stages::SafeTensors weights() const;

 private:
  void forward(uint64_t step, int microBatch, double& lossSum);
  // A decoder's greedy translations of the memory of validation samples from firstSample,
  // with their references.
  void translate(const at::Tensor& memory, int firstSample, std::vector<std::string>& hypotheses,
                 std::vector<std::string>& references);
  // An MLM encoder's batch: masked inputs, targets only where masked; others unchanged.
  stages::TokenBatch masked(stages::TokenBatch batch, uint64_t step, int64_t firstSample) const;
  static constexpr uint64_t kEvalMaskStream = ~uint64_t{0};  // validation's masks: the same every time
  // A fan-in (fan_in.cpp). A producer: its own data and loss (masked-token prediction), then
  // token IDs and replaced flags to the consumer, never more than max_staleness steps ahead
  // of the consumer's acknowledgements. The consumer: every producer's micro-batches, then an
  // acknowledgement of the step to each producer.
  void producerStep(uint64_t step, double& lossSum);
  void consumerStep(uint64_t step, double& lossSum);
  void waitForCredit(uint64_t step);
  void acknowledge(uint64_t step);
  std::optional<double> fanInEval(uint64_t step);
  // The consumer's next frame of (direction, step, micro-batch) from any producer; frames of
  // later steps wait in a bounded reorder buffer.
  compression::TensorFrame takeProducerFrame(compression::FrameDirection direction, uint64_t step, uint32_t microBatch);
  at::Tensor receiveTokens(compression::FrameDirection direction, uint64_t step, uint32_t microBatch, int64_t samples);
  nlohmann::json fanInProbes(uint64_t step);
  nlohmann::json fanInCompute();  // the compute profile's keys, for a generator or the discriminator
  // The compute profile's record: the measured fits' points and what every profile adds.
  nlohmann::json computeProfile(nlohmann::json forward, nlohmann::json backward, nlohmann::json outputBytes,
                                nlohmann::json gradientBytes) const;
  // Times round trips to stage `to` over next_: tiny probes, the job's frame `job` (zeros
  // of minBytes when smaller), then a frame three times that, then a burst of tiny probes
  // back to back; probe i carries micro-batch index(i). The link's one-way delay (the tiny
  // round trip), its bandwidth (the slope between the two large frames), its per-message
  // cost (the burst past one round trip, a message) and the round trips.
  static constexpr int kProbes = 4;      // round trips per probe size; the fastest counts
  static constexpr int kProbeSizes = 3;  // tiny, the job's frame, three times that (measureLink)
  static constexpr int kProbeBurst = 16;  // tiny probes sent back to back: the per-message cost
  static constexpr int kProbeFrames = kProbeSizes * kProbes + kProbeBurst;  // echoed a link
  nlohmann::json measureLink(uint64_t step, compression::EncodedTensor job, size_t minBytes, uint16_t to,
                             const std::function<uint32_t(int)>& index);
  uint16_t consumerStage() const { return static_cast<uint16_t>(spec_.stages.size() - 1); }
  int producers() const { return static_cast<int>(spec_.stages.size()) - 1; }
  bool readsData() const { return fanIn_ ? !isLast() : isFirst() || isLast(); }
  // After the step's last backward: checks the gradients for NaN/Inf and clips them by the
  // global norm across stages (both by exchanging per-parameter norms along the pipeline,
  // when clipping or the skip policy is on). False: skip this step's update.
  bool finishGradients(uint64_t step);
  // The global gradient norm: this stage's per-parameter norms go upstream joined to the
  // later stages', the first stage takes the norm of them all (as clip_grad_norm_ does in
  // one process) and sends it back downstream.
  at::Tensor exchangeNorms(uint64_t step, const at::Tensor& mine);
  // The global gradient norm of `step` from the previous stage (NormDown); refuses a
  // negative one.
  at::Tensor receiveNormTotal(uint64_t step);
  void backward(uint64_t step, int microBatch);
  // ZB-H1: the oldest pending micro-batch's W pass (its linear layers' weight gradients).
  void runWeightPass();
  // The stage a step's ops run on: model_, or under the delayed update the working copy of
  // the step's parity.
  stages::Stage& active(uint64_t step) { return delayed_ ? *copies_[step % 2] : *model_; }
  CodecPair& codecsFor(uint64_t step) {
    return static_cast<int64_t>(step) < spec_.compression.warmupSteps ? warmup_ : steady_;
  }
  // The delayed update (delayed_update.cpp). A round: the pending gradients two steps old
  // are applied to model_, which is copied into the step's working copy; then the step's
  // ops, the previous step's deferred backwards among them (delayedRoundOps).
  struct PendingGradient {
    uint64_t step = 0;
    at::Tensor total;        // the global gradient norm; undefined until known
    bool needsTotal = true;  // false: no clipping and nothing to skip (checked locally)
  };
  void runRound(uint64_t step, double& lossSum, bool& skipped);
  // After a step's last backward on this stage: averages over the copies, then sends the
  // norms upstream (joined to the later stages'); the first stage sends the total down.
  void completeGradient(uint64_t step);
  void resolveTotal(PendingGradient& pending);  // the total from the previous stage, passed on
  bool applyGradient(PendingGradient pending);  // false: skipped (a non-finite total)
  std::vector<std::pair<std::string, at::Tensor>> gradients(stages::Stage& copy) const;
  // With replicas: every copy's gradients become the whole batch's (timed as the all-reduce).
  void averageOverReplicas(const std::vector<std::pair<std::string, at::Tensor>>& gradients);
  // The next frame, checked to carry expectedShape (float32) before it is decoded; `tokens`,
  // where this stage holds them, are the micro-batch's token IDs for a codec that predicts
  // from them (compression/side_tokens.h).
  at::Tensor receive(PeerLink& link, compression::FrameDirection direction, uint64_t step, int microBatch,
                     const std::vector<int64_t>& expectedShape, const at::Tensor& tokens = at::Tensor());
  // Shape of what crosses into `stage` for `samples` sequences.
  std::vector<int64_t> boundaryShape(int stage, int64_t samples) const;
  // A frame's header fields, addressed to `toStage`; the caller fills in the tensor.
  compression::TensorFrame frameFor(compression::FrameDirection direction, uint64_t step, int microBatch,
                                    uint16_t toStage) const;
  compression::TensorFrame awaitFrame(PeerLink& link, compression::FrameDirection direction, uint64_t step,
                                      int microBatch);
  nlohmann::json profileCompute();
  // The fastest of a few all-reduces of a step's gradient bytes among the copies.
  double timeAllReduce();
  // A batch's tensors on the stage's device.
  stages::TokenBatch onDevice(stages::TokenBatch batch) const;
  nlohmann::json probeLinks(uint64_t step);
  at::Tensor randomInput(int64_t samples, at::Generator& generator) const;
  void transmit(PeerLink& link, compression::Codec& codec, compression::FrameDirection direction,
                uint64_t step, int microBatch, uint16_t toStage, const at::Tensor& tensor,
                const at::Tensor& tokens = at::Tensor());
  compression::Codec& decoderFor(const std::string& spec);
  // The decoder of one stream (a direction's frames): a stateful decoder ("+pred") must see
  // exactly the messages its encoder saw, in their order.
  compression::Codec& streamDecoder(compression::FrameDirection direction, const std::string& spec);
  // restore()'s part for them: the snapshot's "decoder/<direction>/<spec>/<name>" tensors
  // replace every stream decoder (a stream absent from it starts afresh).
  void restoreDecoders(const std::map<std::string, at::Tensor>& tensors, std::set<std::string>& used,
                       const std::string& where);
  uint64_t bytesSent() const;

  protocol::JobSpec spec_;  // batchSize: this copy's share of the batch
  int stage_;
  int replica_ = 0;
  c10::Device device_ = c10::Device(c10::kCPU);
  std::unique_ptr<ReplicaGroup> replicas_;  // null: a single copy
  uint64_t jobKey_;
  double memoryBudgetBytes_;
  scheduler::Schedule schedule_;
  RunPlan plan_;
  std::unique_ptr<stages::ModelSource> source_;
  stages::ParameterCounts parameterCounts_;
  nlohmann::json initReport_ = nlohmann::json::array();  // per init_from file: loaded, from_seed
  std::unique_ptr<stages::Stage> model_;
  std::unique_ptr<stages::DataSource> data_;
  double evalAccuracy_ = -1;  // a classifier's last validation accuracy (-1: none)
  double evalBleu_ = -1;      // a translation's last validation BLEU (-1: none)
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  CodecPair steady_;
  CodecPair warmup_;
  std::unique_ptr<compression::Codec> evalCodec_;  // its own stream: eval must not touch training's residuals
  std::string steadyForward_, steadyBackward_;      // the specs steady_ was made from
  CodecPair* codecs_ = &steady_;                     // the phase of the current step
  std::map<std::string, std::unique_ptr<compression::Codec>> decoders_;
  std::map<std::string, std::unique_ptr<compression::Codec>> streamDecoders_;  // "<direction>/<spec>"
  static constexpr size_t kMaxDecoderStreams = 64;
  std::unique_ptr<PeerLink> previous_;
  std::unique_ptr<PeerLink> next_;
  bool fanIn_ = false;
  std::vector<std::unique_ptr<PeerLink>> producerLinks_;  // the consumer's: acknowledgements out
  std::map<std::tuple<int, uint64_t, uint32_t>, compression::TensorFrame> early_;  // (direction, step, mb)
  static constexpr int64_t kNoAck = INT64_MIN;
  int64_t acked_ = kNoAck;  // a producer: the consumer's last acknowledged step
  int lead_ = -1;        // a producer: how far ahead the current step started
  int64_t maskId_ = 0;   // a producer: the [MASK] token, one past the tokenizer's vocabulary
  std::map<int, at::Tensor> lossGradients_;  // last stage: d(loss/m)/d(logits) per micro-batch
  std::deque<int> pendingWeights_;            // ZB-H1: micro-batches whose W pass is due, oldest first
  bool delayed_ = false;                     // spec "update": "delayed"
  std::unique_ptr<stages::Stage> copies_[2];  // working copies for even and odd steps
  std::deque<PendingGradient> pending_;       // complete gradients not yet applied, oldest first
  std::optional<uint64_t> deferred_;          // the step whose last backwards the next round runs
  std::map<std::string, at::Tensor> priorWeights_;  // model_ before its last update (weight prediction)
  // Under the delayed update a norm frame going down may arrive among later steps' frames:
  // it waits here (a few at most) until its gradient is applied.
  std::map<std::pair<int, uint64_t>, compression::TensorFrame> stashedNorms_;
  std::function<bool()> aborted_ = [] { return false; };
  double computeSeconds_ = 0;
  double allReduceSeconds_ = 0;  // the step's gradient all-reduce among the copies
  uint64_t bytesRaw_ = 0;
  uint64_t rawBackward_ = 0;
};

}  // namespace skytrain::daemon
