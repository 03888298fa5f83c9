#include "daemon/stage/runner/pipeline_runner.h"

#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>

#include "daemon/net/replica_group.h"
#include "daemon/ops/files.h"
#include "daemon/ops/timing.h"
#include "daemon/protocol/messages.h"
#include "daemon/stage/topology/chain.h"
#include "daemon/stage/runner/codec_set.h"
#include "daemon/stage/update/delayed_update.h"
#include "daemon/stage/topology/evaluation.h"
#include "daemon/stage/topology/fan_in.h"
#include "daemon/stage/update/gradient_pipeline.h"
#include "daemon/stage/state/initial_weights.h"
#include "daemon/stage/state/model_setup.h"
#include "daemon/stage/runner/profiler.h"
#include "daemon/stage/runner/schedule_executor.h"
#include "daemon/stage/runner/stage_links.h"
#include "daemon/stage/state/stage_state.h"
#include "daemon/stage/update/sync_update.h"
#include "scheduler/error.h"
#include "stages/models/model_source.h"
#include "stages/weights/safetensors.h"
#include "stages/weights/weights.h"

namespace skytrain::daemon {

PipelineRunner::PipelineRunner(const protocol::JobSpec& spec, int stage, uint64_t jobKey, double memoryBudgetBytes,
                               int replica, std::vector<int> pipelines) {
  if (pipelines.empty()) {
    for (int r = 0; r < protocol::replicaCount(spec); ++r) pipelines.push_back(r);
  }
  const auto place = std::find(pipelines.begin(), pipelines.end(), replica);
  SKYTRAIN_CHECK(place != pipelines.end(), "replica " << replica << " is not among the pipelines that train");
  if (spec.batchSize % static_cast<int>(pipelines.size()) != 0) {
    throw Error("batch_size " + std::to_string(spec.batchSize) + " does not split over " +
                std::to_string(pipelines.size()) + " pipelines");
  }
  context_.spec = spec;
  context_.spec.batchSize = spec.batchSize / static_cast<int>(pipelines.size());  // this copy's share
  context_.stage = stage;
  context_.replica = replica;
  context_.pipeline = static_cast<int>(place - pipelines.begin());
  context_.pipelines = static_cast<int>(pipelines.size());
  context_.device = c10::Device(protocol::placementOf(spec, protocol::slotOf(spec, stage, replica)).device);
  context_.jobKey = jobKey;
  source_ = stages::makeModelSource(modelConfig(spec));
  StageFacts facts;
  facts.memoryBudgetBytes = memoryBudgetBytes;
  facts.delayed = spec.update == "delayed";
  model_ = buildStage(&facts);
  std::unique_ptr<stages::Stage> copies[2];
  for (auto& copy : copies) {
    if (!facts.delayed) break;
    copy = buildStage(nullptr);  // its values come from model_ at each round's start
  }

  fanIn_ = source_->fanIn();
  delayed_ = facts.delayed;
  if (protocol::readsData(spec, stage)) data_ = source_->makeData(dataConfig(spec, stage), stage);
  objective_ = source_->objective(data_.get());
  if (data_) {
    const int needed = data_->tokenizer().vocabSize() + objective_->extraTokens();
    if (needed > spec.model.vocabSize) {
      throw SpecError("$.model.vocab_size", std::to_string(spec.model.vocabSize) + " is smaller than tokenizer " +
                                                data_->tokenizer().name() + "'s " +
                                                std::to_string(data_->tokenizer().vocabSize()) +
                                                objective_->extraTokensName());
    }
  }
  // ZeRO-1: this copy's AdamW holds its shard of the parameters; after each update every
  // copy broadcasts its shard's new values to the others (gatherShards).
  const int replicas = protocol::replicaCount(spec);
  std::vector<at::Tensor> owned;
  if (spec.optimizer.zero > 0 && replicas > 1) {
    const auto parameters = model_->parameters();
    const auto owners = shardOwners(parameters, replicas);
    shards_.resize(replicas);
    for (size_t i = 0; i < parameters.size(); ++i) {
      shards_[owners[i]].push_back(parameters[i].detach());  // the same storage, written outside autograd
      if (owners[i] == replica) owned.push_back(parameters[i]);
    }
  }
  optimizer_ = makeOptimizer(*model_, spec.optimizer, source_->tied(), stage, shards_.empty() ? nullptr : &owned);

  codecs_ = std::make_unique<CodecSet>(spec.compression);
  links_ = std::make_unique<StageLinks>(context_, counters_);
  links_->setStashNorms(facts.delayed);
  executor_ = std::make_unique<ScheduleExecutor>(context_, counters_, *links_, *codecs_, *source_, *model_, data_.get(),
                                                 *objective_);
  gradients_ = std::make_unique<GradientPipeline>(context_, counters_, *links_, /*ownNorm=*/fanIn_);
  gradients_->setTied(source_->tied());
  executor_->setLossScaler(gradients_->lossScaler());
  profiler_ = std::make_unique<Profiler>(context_, *links_, *codecs_, *executor_, *gradients_, *source_, *model_,
                                         data_.get(), *optimizer_, std::move(facts));
  if (fanIn_) {
    topology_ = std::make_unique<FanIn>(context_, counters_, *links_, *codecs_, *executor_, *profiler_, *source_,
                                        *model_, data_.get(), *objective_, *optimizer_);
  } else {
    evaluation_ = std::make_unique<Evaluation>(context_, *links_, *codecs_, *executor_, *model_, data_.get(),
                                               *objective_);
    topology_ = std::make_unique<Chain>(context_, *executor_, *model_, *evaluation_, *profiler_);
  }
  if (copies[0]) {
    update_ = std::make_unique<DelayedUpdate>(context_, counters_, *model_, copies, *optimizer_, *gradients_, *executor_);
  } else {
    update_ = std::make_unique<SyncUpdate>(
        context_, counters_, *model_, *optimizer_, *gradients_,
        [this](uint64_t step, double& lossSum) { topology_->runOps(step, lossSum); },
        [this] {
          if (updateFence_) updateFence_();
        },
        [this] { gatherShards(); });
  }
  state_ = std::make_unique<StageState>(context_, *model_, *optimizer_, *codecs_, *links_, *update_,
                                        data_ ? data_->fingerprint() : std::string());

  RunPlan initial;
  initial.microBatches = spec.microBatches > 0 ? spec.microBatches : 1;
  const auto kind = scheduler::parseScheduleKind(spec.schedule);
  // Kinds with warm-up depths from the links wait for the coordinator's plan.
  if (kind && *kind != scheduler::ScheduleKind::OneFOneBDelayAware && *kind != scheduler::ScheduleKind::ZeroBubbleH1) {
    initial.schedule = *kind;
  }
  setPlan(initial);
}

PipelineRunner::~PipelineRunner() = default;

namespace {

// A subspace model's frame, every subspace.* tensor by name and bytes, as XXH64 in hex; ""
// for a model without one.
std::string frameFingerprint(const stages::Stage& stage) {
  uint64_t hash = 0;
  bool any = false;
  for (const auto& [name, tensor] : stage.stateDict()) {
    if (name.rfind("subspace.", 0) != 0) continue;
    const at::Tensor bytes = tensor.detach().to(torch::kCPU).contiguous();
    hash = XXH64(name.data(), name.size(), hash);
    hash = XXH64(bytes.data_ptr(), bytes.numel() * bytes.element_size(), hash);
    any = true;
  }
  return any ? fmt::format("{:016x}", hash) : std::string();
}

}  // namespace

std::unique_ptr<stages::Stage> PipelineRunner::buildStage(StageFacts* facts) {
  const auto& spec = context_.spec;
  const int stage = context_.stage;
  std::unique_ptr<stages::Stage> built;
  try {
    built = source_->build(stage);
    const stages::ParameterCounts counts = stages::applyTrainable(*built, spec.model.trainable);
    if (facts) {
      facts->parameters = counts;
      facts->initReport = loadInitialWeights(*built, spec, stage, source_->namePrefix(stage));
      facts->frame = frameFingerprint(*built);
    }
  } catch (const Error& e) {  // WireError (a malformed file) included
    throw Error(std::string(protocol::kBadModel) + e.what());
  }
  if (const auto autocast = stages::autocastFor(spec.precision);
      autocast != stages::Autocast::Off && !built->setAutocast(autocast)) {
    throw Error(std::string(protocol::kBadModel) + "stage " + std::to_string(stage) + " cannot compute in " +
                spec.precision);
  }
  if (!context_.device.is_cpu()) {
    torch::NoGradGuard noGrad;  // parameters and buffers in place, as Module.to() does
    for (auto& [name, tensor] : built->stateDict()) tensor.set_data(tensor.to(context_.device));
  }
  return built;
}

void PipelineRunner::connect(std::unique_ptr<PeerLink> previous, std::unique_ptr<PeerLink> next) {
  links_->connect(std::move(previous), std::move(next), fanIn_);
}

void PipelineRunner::connectProducers(std::vector<std::unique_ptr<PeerLink>> producers) {
  SKYTRAIN_CHECK(fanIn_, "producer links do not match stage " << context_.stage);
  links_->connectProducers(std::move(producers), context_.stages() - 1);
}

void PipelineRunner::setReplicaGroup(std::unique_ptr<ReplicaGroup> group) { gradients_->setReplicaGroup(std::move(group)); }

int PipelineRunner::microBatches() const { return executor_->schedule().microBatches; }

void PipelineRunner::setPlan(const RunPlan& plan) {
  const auto& spec = context_.spec;
  // The plan's m is for a share with every copy training; fewer pipelines run more of the
  // same size.
  const int replicas = protocol::replicaCount(spec);
  const int m = plan.microBatches * replicas / context_.pipelines;
  if (plan.microBatches < 1 || (plan.microBatches * replicas) % context_.pipelines != 0 || spec.batchSize % m != 0) {
    throw Error("plan: " + std::to_string(plan.microBatches) + " micro-batches do not divide " +
                (replicas > 1 ? "a replica's share of batch_size, " : "batch_size ") + std::to_string(spec.batchSize) +
                (context_.pipelines < replicas ? " on " + std::to_string(context_.pipelines) + " pipelines" : ""));
  }
  scheduler::Schedule schedule = scheduler::makeSchedule(plan.schedule, context_.stages(), m, plan.warmups);
  const std::string problem = scheduler::validateSchedule(schedule);
  if (!problem.empty()) throw Error("plan: schedule " + scheduler::toString(plan.schedule) + ": " + problem);
  codecs_->applyPlan(plan.forwardCodec, plan.backwardCodec);
  model_->setSplitBackward(plan.schedule == scheduler::ScheduleKind::ZeroBubbleH1);
  executor_->setSchedule(std::move(schedule));
  plan_ = plan;
  plan_.forwardCodec = codecs_->forwardSpec();
  plan_.backwardCodec = codecs_->backwardSpec();
}

void addStepFields(const StepStats& stats, protocol::StageReport& report) {
  if (!std::isnan(stats.loss)) report.loss = stats.loss;
  report.stepSeconds = stats.stepSeconds;
  report.computeSeconds = stats.computeSeconds;
  report.bytesSent = static_cast<double>(stats.bytesSent);
  report.bytesRaw = static_cast<double>(stats.bytesRaw);
  report.bytesBackward = static_cast<double>(stats.bytesBackward);
  report.rawBackward = static_cast<double>(stats.rawBackward);
  report.lr = stats.lr;
  report.skipped = stats.skipped;
  report.lead = stats.lead;
  report.codeShares = stats.codeShares;
  report.senderLosses = stats.senderLosses;
}

StepStats PipelineRunner::runStep(uint64_t step) {
  const auto start = Clock::now();
  const uint64_t bytesBefore = links_->bytesSent();
  const uint64_t backwardBefore = links_->bytesSentBackward();
  counters_ = StepCounters{};
  StepStats stats;
  double lossSum = 0;
  stats.skipped = !update_->runStep(step, lossSum);
  stats.lead = topology_->lead();
  if (gradients_->lossScaler().enabled()) stats.lossScale = gradients_->lossScale();
  topology_->endStep(step);
  stats.lr = protocol::learningRate(context_.spec.optimizer, static_cast<int64_t>(step), context_.spec.steps);
  const int lossTerms = topology_->lossTerms();
  stats.loss = lossTerms > 0 ? lossSum / lossTerms : std::nan("");
  stats.computeSeconds = counters_.computeSeconds;
  stats.allReduceSeconds = counters_.allReduceSeconds;
  stats.bytesSent = links_->bytesSent() - bytesBefore;
  stats.bytesRaw = counters_.bytesRaw;
  stats.bytesBackward = links_->bytesSentBackward() - backwardBefore;
  stats.rawBackward = counters_.rawBackward;
  stats.codeShares = model_->codeShares();
  stats.senderLosses = model_->takeSenderLosses();
  stats.stepSeconds = secondsSince(start);
  return stats;
}

void PipelineRunner::drain() { update_->drain(); }

void PipelineRunner::flush() { update_->flush(); }

nlohmann::json PipelineRunner::profile(uint64_t step) { return topology_->profile(step); }

std::optional<double> PipelineRunner::runEval(uint64_t step) { return topology_->evaluate(step); }

std::optional<double> PipelineRunner::evalMetric(const std::string& name) const {
  const auto metrics = topology_->evalMetrics();
  const auto it = metrics.find(name);
  return it == metrics.end() ? std::nullopt : std::optional<double>(it->second);
}

void PipelineRunner::gatherShards() {
  if (shards_.empty()) return;
  auto* group = gradients_->replicas();
  SKYTRAIN_CHECK(group, "ZeRO-1 shards without a replica group");
  for (int owner = 0; owner < static_cast<int>(shards_.size()); ++owner) group->broadcast(shards_[owner], owner);
}

StageSnapshot PipelineRunner::snapshot(const std::string& jobId, int64_t step,
                                       const std::vector<std::pair<std::string, at::Tensor>>* extras) const {
  // The synchronous update writes the weights and moments only in its optimizer step, which
  // waits for the writer (setUpdateFence); the delayed one moves the weights in its forwards.
  return state_->snapshot(jobId, step, plan_, /*borrow=*/!delayed_, extras);
}

std::vector<std::pair<std::string, at::Tensor>> PipelineRunner::extras() const { return state_->extras(); }

void PipelineRunner::restore(const StageSnapshot& snapshot) {
  state_->restore(snapshot, [this](const RunPlan& plan) { setPlan(plan); });
}

std::vector<char> PipelineRunner::serializedState() const {
  c10::Dict<std::string, at::Tensor> dict;  // the tensors themselves: pickling copies them once
  for (const auto& [name, tensor] : model_->stateDict()) dict.insert(name, tensor.detach().to(at::kCPU));
  return torch::pickle_save(dict);
}

stages::SafeTensors PipelineRunner::weights() const {
  stages::SafeTensors out;
  for (const auto& [name, tensor] : model_->stateDict()) out.tensors.emplace_back(name, tensor.detach().to(at::kCPU).contiguous());
  out.metadata = {{"format", "pt"}, {"skytrain_stage", std::to_string(context_.stage)}};
  return out;
}

}  // namespace skytrain::daemon
