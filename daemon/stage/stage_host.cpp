#include "daemon/stage/stage_host.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "compression/codec_registry.h"
#include "compression/wire/tensor_frame.h"
#include "daemon/ops/files.h"
#include "daemon/ops/memory_limit.h"
#include "daemon/protocol/failures.h"
#include "daemon/protocol/job_identity.h"
#include "daemon/stage/admission.h"
#include "daemon/stage/state/model_setup.h"
#include "daemon/stage/weight_export.h"
#include "scheduler/error.h"
#include "stages/models/model_source.h"

namespace skytrain::daemon {

namespace {

// A TorchScript stage after the first whose spec gives no input_shape takes the one its
// coordinator inferred from the previous stage's output; no other stage takes one.
void takeInputShape(protocol::JobSpec& spec, int stage, const std::vector<int64_t>& inferred, const std::string& what) {
  auto& own = spec.stages[stage].inputShape;
  const bool wanted = protocol::takesInputShapes(spec) && stage > 0 && own.empty();
  if (!wanted && !inferred.empty()) {
    throw Error(what + ": the prepare carries an input_shape, but " +
                (own.empty() ? "only a TorchScript stage after the first takes one" : "the spec gives the stage's own"));
  }
  if (wanted && inferred.empty()) {
    throw Error(what + ": stages[" + std::to_string(stage) + "].input_shape is not given, and the prepare carries "
                "none inferred from the previous stage");
  }
  if (wanted) own = inferred;
}

// What a TorchScript stage (not the last) sends on, when the spec leaves the next stage's
// input_shape to be inferred: that stage's shape here too (its gradients come back in it),
// and the coordinator's to pass on. Empty otherwise.
std::vector<int64_t> inferOutputShape(protocol::JobSpec& spec, int stage, const stages::ModelSource& model) {
  const int next = stage + 1;
  if (!protocol::takesInputShapes(spec) || next >= static_cast<int>(spec.stages.size()) ||
      !spec.stages[next].inputShape.empty()) {
    return {};
  }
  std::vector<int64_t> shape;
  try {
    shape = model.sampleOutputShape(stage);
  } catch (const Error& e) {
    throw Error(std::string(protocol::kBadModel) + e.what());
  }
  if (const std::string problem = protocol::sampleShapeProblem(shape); !problem.empty()) {
    throw Error(std::string(protocol::kBadModel) + spec.stages[stage].module + " (stage " + std::to_string(stage) +
                ") outputs one sample as [" + fmt::format("{}", fmt::join(shape, ", ")) + "], which stage " +
                std::to_string(next) + " cannot take: " + problem);
  }
  spec.stages[next].inputShape = shape;
  return shape;
}

}  // namespace

uint64_t jobKey(const std::string& jobId, int attempt, int replica) {
  if (jobId.size() != 16 || jobId.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw Error("job id \"" + jobId + "\" is not 16 lowercase hex digits");
  }
  // A hash of the whole instance, not a mix of its parts: the parts' old XOR let another job
  // id at another attempt land on this one's key. The router refuses a key already open
  // (DataRouter::open), so a collision is refused, never shared.
  const std::string instance = jobId + "/" + std::to_string(attempt) + "/" + std::to_string(replica);
  const uint64_t key = XXH3_64bits(instance.data(), instance.size());
  return key == compression::kLinkProbeJob ? key + 1 : key;
}

namespace {

std::string describe(const protocol::StageRef& ref) {
  return "stage " + std::to_string(ref.stage) + (ref.replica > 0 ? " replica " + std::to_string(ref.replica) : "") +
         " of job " + ref.job;
}

}  // namespace

StageHost::StageHost(zmq::context_t& context, DataRouter& router, StageHostOptions options)
    : context_(context), router_(router), options_(std::move(options)) {}

StageHost::~StageHost() {
  for (auto& entry : workers_) entry.second->abort();
  workers_.clear();
}

StageWorker& StageHost::find(const protocol::StageRef& ref, const std::string& caller) {
  auto it = workers_.find({ref.job, ref.stage, ref.replica});
  if (it == workers_.end()) {
    const auto gone = freed_.find({ref.job, ref.stage, ref.replica});
    if (gone != freed_.end()) throw StageFreed(describe(ref) + " is not hosted here (freed: " + gone->second + ")", gone->second);
    throw Error(describe(ref) + " is not hosted here");
  }
  if (it->second->assignment().coordinatorKey != caller) {
    throw Refusal(describe(ref) + " takes requests only from its job's coordinator");
  }
  return *it->second;
}

std::pair<double, int> StageHost::hosted(const std::string& exceptJob) const {
  double bytes = 0;
  int count = 0;
  const auto add = [&](const std::unique_ptr<StageWorker>& w) {
    if (w->finished() || w->assignment().jobId == exceptJob) return;
    bytes += w->assignment().admittedBytes;
    ++count;
  };
  for (const auto& w : retired_) add(w);
  for (const auto& entry : workers_) add(entry.second);
  return {bytes, count};
}

void StageHost::checkCoordinator(const protocol::StageRef& ref, const std::string& caller) const {
  const auto other = [&](const std::unique_ptr<StageWorker>& w) {
    return w->assignment().jobId == ref.job && w->assignment().coordinatorKey != caller;
  };
  bool taken = std::any_of(retired_.begin(), retired_.end(), other);
  for (const auto& entry : workers_) taken = taken || other(entry.second);
  if (taken) throw Refusal(describe(ref) + ": job " + ref.job + " is hosted here for another coordinator");
}

protocol::Json StageHost::prepare(const protocol::StagePrepare& request, const std::string& caller) {
  // The job is the caller's: its id made from the caller's key, or (a job made before
  // proofs) claimed here by the caller already. Its owner is what the first prepare said.
  jobKey(request.job);  // 16 hex digits, or it throws: the id becomes a path
  const bool proven = !request.proof.empty();
  if (proven && protocol::jobIdFor(caller, request.proof) != request.job) {
    throw Refusal(describe(request) + ": the job's id was not made by the daemon preparing it");
  }
  checkCoordinator(request, caller);
  const std::string jobRoot = options_.stateDir + "/jobs/" + request.job;
  if (request.dryRun) {
    // A plan is not a job: it claims nothing and writes nothing here. So it must be a new
    // job the caller made, which no claim on disk could be overruling.
    std::error_code ec;
    if (!proven) throw Refusal(describe(request) + ": a dry run needs the job's proof");
    if (std::filesystem::exists(jobRoot, ec) || ec) {
      throw Refusal(describe(request) + ": a dry run of job " + request.job + ", which has state on this daemon");
    }
  } else {
    claimJob(jobRoot, request.job, caller, request.owner, /*mayCreate=*/proven);
  }
  StageAssignment a;
  a.jobId = request.job;
  a.attempt = request.attempt;
  a.replica = request.replica;
  a.jobKey = jobKey(a.jobId, a.attempt, a.replica);
  a.resumeStep = request.resumeStep;
  a.stage = request.stage;
  a.spec = protocol::parseJobSpec(request.spec);
  a.privateAddress = options_.privateAddress;
  a.coordinator = request.coordinator;
  a.coordinatorKey = caller;
  a.self = options_.self;
  a.prepareTimeoutS = options_.prepareTimeoutS;
  if (a.stage >= static_cast<int>(a.spec.stages.size()) || a.replica >= protocol::replicaCount(a.spec)) {
    throw Error(describe(request) + " is not in the job's spec");
  }
  takeInputShape(a.spec, a.stage, request.inputShape, describe(request));
  a.resumeFrom = request.resumeFrom;
  a.pipelines = request.pipelines;
  if (a.pipelines.empty()) {
    for (int r = 0; r < protocol::replicaCount(a.spec); ++r) a.pipelines.push_back(r);
  }
  if (a.pipelines.back() >= protocol::replicaCount(a.spec) ||
      std::find(a.pipelines.begin(), a.pipelines.end(), a.replica) == a.pipelines.end()) {
    throw Error(describe(request) + ": the pipelines named are not the job's, or leave this copy out");
  }
  if (!a.resumeFrom.empty() && !protocol::heals(a.spec)) {
    throw Error(describe(request) + ": resume_from \"" + a.resumeFrom + "\" is for a job that heals (replicated, failure.heal)");
  }
  a.device = protocol::placementOf(a.spec, protocol::slotOf(a.spec, a.stage, a.replica)).device;
  checkDevice(a.device, describe(request));  // a device that is not here: an error naming it
  if (protocol::replicaCount(a.spec) > 1 && a.privateAddress.empty()) {
    throw Error(describe(request) + " is replicated, but this daemon's config has no private_address for c10d's "
                "Gloo connections (they have no authentication: give the cluster's private IP)");
  }
  const auto key = std::make_tuple(a.jobId, a.stage, a.replica);
  if (auto it = workers_.find(key); it != workers_.end()) {
    // A restarted attempt (or a restarted coordinator) replaces an earlier one of its own.
    const auto& old = it->second->assignment();
    if (old.coordinatorKey != caller || old.attempt >= a.attempt) {
      throw Error(describe(request) + " attempt " + std::to_string(old.attempt) + " is already here");
    }
    it->second->abort();
    retired_.push_back(std::move(it->second));
    workers_.erase(it);
  }
  // Bounded input: data under the data roots, memory within the budget, before anything
  // is allocated.
  resolveDataFiles(a.spec, a.stage, options_.dataRoots);
  // One budget for the daemon: what the stages already here were admitted with comes off
  // it (the runtime once), so N jobs cannot take N budgets. A restarted attempt's
  // predecessor, being torn down, is not counted.
  const auto [hostedBytes, hostedStages] = hosted(a.jobId);
  const double budget = options_.memoryBudgetBytes - hostedBytes;
  const std::string source = options_.memoryBudgetSource +
                             (hostedStages > 0 ? ", less " + megabytes(hostedBytes) + " admitted for the " +
                                                     std::to_string(hostedStages) + " other stage(s) hosted here"
                                               : "");
  // One model source for admission and the output's shape: a TorchScript stage's module
  // runs once for both.
  const auto model = stages::makeModelSource(modelConfig(a.spec));
  const MemoryEstimate memory = estimateStageMemory(a.spec, a.stage, budget, model.get());
  checkMemory(memory, a.stage, budget, source);
  const std::vector<int64_t> outputShape = inferOutputShape(a.spec, a.stage, *model);
  a.memoryBudgetBytes = budget - memory.fixedBytes();
  a.admittedBytes = memory.totalBytes() - memory.runtimeBytes;
  // Copies after the first keep their checkpoints and final weights apart (two may share a
  // daemon); the job's export reads replica 0's.
  a.jobDir = options_.stateDir + "/jobs/" + a.jobId + (a.replica > 0 ? "/replica-" + std::to_string(a.replica) : "");
  if (!request.dryRun) {
    makeDirectories(a.jobDir);
    recordStageOwner(a.jobDir, a.stage, caller, request.owner);
  }
  if (protocol::heals(a.spec) && !request.dryRun) {
    if (a.resumeFrom == "memory") {  // with none kept here, the worker takes it from a healthy copy
      const auto kept = kept_.find(key);
      if (kept != kept_.end() && kept->second.coordinatorKey == caller) a.restoreFrom = kept->second.state;
    }
    a.keep = std::make_shared<KeptState>();
    kept_[key] = {a.keep, caller};
  }
  auto mailbox = router_.open(a.jobKey, static_cast<uint16_t>(a.stage));
  const auto& part = a.spec.stages[a.stage];
  const std::string what = part.lastLayer > 0 ? "layers [" + std::to_string(part.firstLayer) + ", " +
                                                    std::to_string(part.lastLayer) + ")"
                                              : a.spec.model.kind + " stage";
  spdlog::info("job {} {}: prepared ({} on {}), estimated {}", a.jobId, protocol::describeSlot(a.spec, protocol::slotOf(a.spec, a.stage, a.replica)),
               what, a.device, memory.describe());
  workers_[key] = std::make_unique<StageWorker>(context_, std::move(a), std::move(mailbox));
  // The coordinator keeps this, to say what admission expected should the stage's daemon be
  // killed for memory (daemon/sentinel.h).
  protocol::StagePrepareReply reply;
  reply.dataEndpoint = options_.dataEndpoint;
  reply.memory = "admission estimated " + memory.describe() + " against a budget of " +
                 describeBudget(options_.memoryBudgetBytes, options_.memoryBudgetSource);
  reply.outputShape = outputShape;  // the next stage's input_shape, when inferred
  return protocol::toJson(reply);
}

protocol::Json StageHost::start(const protocol::StageStart& request, const std::string& caller) {
  StageWorker& worker = find(request, caller);
  const auto& a = worker.assignment();
  const int stages = static_cast<int>(a.spec.stages.size());
  const bool first = a.stage == 0, last = a.stage + 1 == stages;
  bool matches = first == request.previous.empty() && last == request.next.empty() && request.producers.empty();
  std::vector<std::string> previousKeys{request.previousKey};
  if (protocol::isFanIn(a.spec)) {  // producers: only a next stage; the consumer: every producer
    matches = request.previous.empty() && last == request.next.empty() &&
              request.producers.size() == (last ? static_cast<size_t>(stages - 1) : 0);
    previousKeys.clear();
    for (const auto& p : request.producers) previousKeys.push_back(p.key);
  }
  if (!matches) {
    throw Error("stage.start: the neighbours given do not match stage " + std::to_string(a.stage) + " of " +
                std::to_string(stages));
  }
  router_.authorize(a.jobKey, static_cast<uint16_t>(a.stage), std::move(previousKeys), request.nextKey);
  worker.start(request);
  return {{"ok", true}};
}

protocol::Json StageHost::abort(const protocol::StageAbort& request, const std::string& caller) {
  if (workers_.count({request.job, request.stage, request.replica})) find(request, caller).abort();
  return {{"ok", true}};  // idempotent: an unknown stage is already gone
}

protocol::Json StageHost::plan(const protocol::StagePlan& request, const std::string& caller) {
  RunPlan plan;
  plan.microBatches = request.microBatches;
  const auto kind = scheduler::parseScheduleKind(request.schedule);
  if (!kind) throw Error("plan names an unknown schedule \"" + request.schedule + "\"");
  plan.schedule = *kind;
  plan.warmups = request.warmups;
  // This stage's codecs among the links': forward on its link to the next, backward on its
  // link to the previous. Checked here, so a bad name is the coordinator's error.
  if (static_cast<size_t>(request.stage) < request.forwardCodecs.size()) plan.forwardCodec = request.forwardCodecs[request.stage];
  if (request.stage > 0 && static_cast<size_t>(request.stage - 1) < request.backwardCodecs.size()) {
    plan.backwardCodec = request.backwardCodecs[request.stage - 1];
  }
  for (const auto& codec : {plan.forwardCodec, plan.backwardCodec}) {
    if (!codec.empty()) compression::builtinCodecs().make(codec);
  }
  find(request, caller).deliverPlan(plan);
  return {{"ok", true}};
}

protocol::Json StageHost::heartbeat(const protocol::StageHeartbeat& request, const std::string& caller) {
  StageWorker& worker = find(request, caller);
  worker.touch();
  worker.keepCheckpoint(request.complete);
  return {{"ok", true}};
}

protocol::Json StageHost::commit(const protocol::StageCommit& request, const std::string& caller) {
  find(request, caller).commit(request.step);
  return {{"ok", true}};
}

protocol::Json StageHost::profile(const protocol::StageProfile& request, const std::string& caller) {
  if (!find(request, caller).requestProfile(static_cast<int>(request.atStep))) {
    throw Error("stage " + std::to_string(request.stage) + " has already begun step " + std::to_string(request.atStep + 1));
  }
  return {{"ok", true}};
}

void StageHost::reap() {
  // Called every ~100 ms: a longer gap means this process did not run (SIGSTOP, a frozen
  // VM), so the coordinators' silence was ours to hear, not theirs; their clocks restart.
  const auto now = std::chrono::steady_clock::now();
  const double gap = std::chrono::duration<double>(now - lastReap_).count();
  lastReap_ = now;
  if (gap > kStallS) {
    spdlog::warn("stages: this daemon did not run for {:.1f} s; its stages' heartbeat clocks restart", gap);
    for (auto& entry : workers_) {
      if (entry.second->heard()) entry.second->touch();
    }
  }
  const auto keptBound = now - std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(options_.prepareTimeoutS));
  for (auto it = kept_.begin(); it != kept_.end();) {
    it = it->second.state->expire(keptBound) ? kept_.erase(it) : std::next(it);
  }
  for (auto it = retired_.begin(); it != retired_.end();) {
    if (!(*it)->finished()) {
      ++it;
      continue;
    }
    router_.close((*it)->assignment().jobKey, static_cast<uint16_t>((*it)->assignment().stage), (*it)->mailbox());
    it = retired_.erase(it);
  }
  for (auto it = workers_.begin(); it != workers_.end();) {
    // Until its first heartbeat a stage is still being set up (its coordinator prepares and
    // starts every stage first): the prepare timeout bounds it then, the heartbeat after.
    const auto& spec = it->second->assignment().spec;
    const double bound = spec.failure.lostAfterS() + (it->second->heard() ? 0.0 : options_.prepareTimeoutS);
    if (!it->second->finished() && it->second->secondsSinceHeartbeat() > bound) {
      const auto& a = it->second->assignment();
      char why[96];
      std::snprintf(why, sizeof why, "no heartbeat from the coordinator for %.1f s", it->second->secondsSinceHeartbeat());
      spdlog::warn("job {} {}: {}; aborting and freeing the stage", a.jobId,
                   protocol::describeSlot(a.spec, protocol::slotOf(a.spec, a.stage, a.replica)), why);
      // Kept for the coordinator's next request, which then says why (a bounded memory).
      if (freed_.size() >= kFreedKept) freed_.clear();
      freed_[it->first] = why;
      it->second->abort();
      it->second->touch();  // warn once
    }
    if (!it->second->finished()) {
      ++it;
      continue;
    }
    const auto& a = it->second->assignment();
    router_.close(a.jobKey, static_cast<uint16_t>(a.stage), it->second->mailbox());
    it = workers_.erase(it);  // joins the finished thread
  }
}

}  // namespace skytrain::daemon
