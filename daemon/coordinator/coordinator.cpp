#include "daemon/coordinator/coordinator.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <thread>
#include <memory>

#include "daemon/coordinator/heartbeat.h"
#include "daemon/coordinator/planning.h"
#include "daemon/coordinator/rejoin_watch.h"
#include "daemon/ops/logging.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/failures.h"
#include "daemon/protocol/printable.h"
#include "daemon/protocol/messages.h"
#include "scheduler/error.h"
#include "scheduler/fan_in.h"

namespace skytrain::daemon {
namespace {

constexpr std::chrono::milliseconds kStageRequestTimeout{5000};
// Re-plan when measured step times are more than 20% off the prediction for 5 steps in a
// row; the stages profile again kReplanLead steps later, at a boundary none has reached.
constexpr double kReplanTolerance = 0.2;
constexpr int kReplanPatience = 5;
constexpr int64_t kReplanLead = 3;
// How long a refused stage.start waits for the stage's own failure report.
constexpr std::chrono::milliseconds kStageReportGrace{1000};

}  // namespace

Coordinator::Coordinator(zmq::context_t& context, JobTable& table, std::string jobId, protocol::JobSpec spec,
                         std::string specText, CoordinatorOptions options, bool resume)
    : context_(context),
      table_(table),
      jobId_(std::move(jobId)),
      spec_(std::move(spec)),
      specText_(std::move(specText)),
      options_(std::move(options)),
      resume_(resume) {
  thread_ = std::thread([this] { run(); });
}

Coordinator::~Coordinator() {
  stop();
  if (thread_.joinable()) thread_.join();
}

std::unique_ptr<protocol::ControlClient> Coordinator::makeClient(int slot) {
  return std::make_unique<protocol::ControlClient>(context_, protocol::placementOf(spec_, slot).daemon,
                                                   protocol::ClientSecurity{options_.self, options_.stageKeys[slot]});
}

int Coordinator::slots() const { return protocol::slotCount(spec_); }

nlohmann::json Coordinator::addressed(nlohmann::json message, int slot) const {
  message["job"] = jobId_;
  message["stage"] = protocol::stageOfSlot(spec_, slot);
  if (protocol::replicaOfSlot(spec_, slot) > 0) message["replica"] = protocol::replicaOfSlot(spec_, slot);
  return message;
}

void Coordinator::prepareAndStart(int attempt, int64_t fromStep) {
  const int stages = static_cast<int>(spec_.stages.size());
  std::vector<std::string> data(slots());
  // What each slot's stage outputs a sample, where it reported it: the next stage's
  // input_shape when the spec leaves it out (a TorchScript stage after the first).
  std::vector<std::vector<int64_t>> outputs(slots());
  const std::string owner = table_.owner(jobId_).first;  // who may export the stages' weights
  const std::string proof = table_.proof(jobId_);
  for (int i = 0; i < slots(); ++i) {
    if (!isActive(i)) continue;
    const std::string where = protocol::describeSlot(spec_, i) + " (" + protocol::placementOf(spec_, i).daemon + "): ";
    try {
      protocol::StagePrepare prepare;
      prepare.job = jobId_;
      prepare.stage = protocol::stageOfSlot(spec_, i);
      prepare.replica = protocol::replicaOfSlot(spec_, i);
      prepare.spec = specText_;
      prepare.coordinator = options_.selfControl;
      prepare.owner = owner;
      prepare.proof = proof;
      prepare.attempt = attempt;
      prepare.resumeStep = fromStep;
      prepare.inputShape = inferInputShape(outputs, i, attempt);
      prepare.dryRun = table_.progress(jobId_).dryRun;
      const int pipeline = protocol::replicaOfSlot(spec_, i);
      const bool joins = std::find(joiners_.begin(), joiners_.end(), pipeline) != joiners_.end();
      prepare.resumeFrom = joins ? "peer" : resumeFrom_;
      prepare.pipelines = pipelines_;
      const auto reply =
          protocol::parsePrepareReply(makeClient(i)->request(protocol::toJson(prepare), kStageRequestTimeout));
      data[i] = reply.dataEndpoint;
      outputs[i] = reply.outputShape;
      admissions_.resize(slots());
      admissions_[i] = reply.memory;
    } catch (const PeerError& e) {
      throw PeerError(where + e.what());
    } catch (const std::exception& e) {
      throw Error(where + e.what());
    }
  }
  const int replicas = protocol::replicaCount(spec_);
  // Last stage first: a stage accepts frames only once it knows its neighbours, and frames
  // flow downstream first (probes, activations), so each receiver is ready before its sender.
  // Replica r of a stage has replica r of its neighbours: one pipeline per copy, so the links
  // between clouds carry each sample once, whatever the number of copies.
  for (int slot = slots() - 1; slot >= 0; --slot) {
    if (!isActive(slot)) continue;
    const int i = protocol::stageOfSlot(spec_, slot), r = protocol::replicaOfSlot(spec_, slot);
    auto at = [&](int stage) { return protocol::slotOf(spec_, stage, r); };
    protocol::StageStart start;
    start.job = jobId_;
    start.stage = i;
    start.replica = r;
    start.groupAttempt = replicas > 1 ? attempt : -1;
    if (protocol::isFanIn(spec_)) {  // every producer feeds the last stage
      if (i + 1 < stages) start.next = data[stages - 1], start.nextKey = options_.stageKeys[stages - 1];
      for (int p = 0; i + 1 == stages && p + 1 < stages; ++p) start.producers.push_back({data[p], options_.stageKeys[p]});
    } else {
      if (i > 0) start.previous = data[at(i - 1)], start.previousKey = options_.stageKeys[at(i - 1)];
      if (i + 1 < stages) start.next = data[at(i + 1)], start.nextKey = options_.stageKeys[at(i + 1)];
    }
    makeClient(slot)->request(protocol::toJson(start), kStageRequestTimeout);
  }
}

std::vector<int64_t> Coordinator::inferInputShape(const std::vector<std::vector<int64_t>>& outputs, int slot, int attempt) {
  const int stage = protocol::stageOfSlot(spec_, slot);
  if (!protocol::takesInputShapes(spec_) || stage == 0 || !spec_.stages[stage].inputShape.empty()) return {};
  const std::vector<int64_t>& shape = outputs[protocol::slotOf(spec_, stage - 1, protocol::replicaOfSlot(spec_, slot))];
  if (shape.empty()) {
    throw Error("stages[" + std::to_string(stage) + "].input_shape is not given, and stage " + std::to_string(stage - 1) +
                "'s daemon did not report what its module outputs (a daemon of an earlier version?): give input_shape");
  }
  if (attempt == 0 && protocol::replicaOfSlot(spec_, slot) == 0) {
    const std::string text = "stage " + std::to_string(stage) + " takes " + fmt::format("[{}]", fmt::join(shape, ", ")) +
                             " a sample, inferred from stage " + std::to_string(stage - 1) + "'s output";
    spdlog::info("job {}: {}", jobId_, text);
    table_.addEvent(jobId_, text);
  }
  return shape;
}

void Coordinator::sendToStages(const nlohmann::json& message, std::chrono::milliseconds timeout) {
  for (int i = 0; i < slots(); ++i) {
    if (isActive(i)) makeClient(i)->request(addressed(message, i), timeout);
  }
}

bool Coordinator::isActive(int slot) const {
  return pipelines_.empty() ||
         std::find(pipelines_.begin(), pipelines_.end(), protocol::replicaOfSlot(spec_, slot)) != pipelines_.end();
}

void Coordinator::setPipelines(std::vector<int> pipelines) {
  std::sort(pipelines.begin(), pipelines.end());
  pipelines.erase(std::unique(pipelines.begin(), pipelines.end()), pipelines.end());
  pipelines_ = pipelines.size() == static_cast<size_t>(protocol::replicaCount(spec_)) ? std::vector<int>{} : pipelines;
}

bool Coordinator::fits(size_t pipelines) const {
  // The batch splits over them, and a copy's share into the plan's micro-batches of the same
  // size: m * R / P of them (PipelineRunner::setPlan).
  const int p = static_cast<int>(pipelines), m = std::max(1, table_.progress(jobId_).microBatches);
  return p > 0 && spec_.batchSize % p == 0 && (m * protocol::replicaCount(spec_)) % p == 0;
}

std::vector<int> Coordinator::activePipelines() const {
  if (!pipelines_.empty()) return pipelines_;
  std::vector<int> all;
  for (int r = 0; r < protocol::replicaCount(spec_); ++r) all.push_back(r);
  return all;
}

protocol::ControlClient& Coordinator::slotClient(int slot) {
  slotClients_.resize(slots());
  if (!slotClients_[slot]) slotClients_[slot] = makeClient(slot);
  return *slotClients_[slot];
}

void Coordinator::postToSlots(const nlohmann::json& message) {
  for (int i = 0; i < slots(); ++i) {
    if (!isActive(i)) continue;
    try {
      auto& client = slotClient(i);
      client.post(addressed(message, i));
      while (client.tryReceive()) {
      }
    } catch (const std::exception& e) {
      spdlog::warn("job {}: {} to {}: {}", jobId_, message.value("type", "?"), protocol::describeSlot(spec_, i), e.what());
    }
  }
}

void Coordinator::abortStages(const std::set<std::string>& skip) {
  for (int i = 0; i < slots(); ++i) {
    if (!isActive(i) || skip.count(protocol::placementOf(spec_, i).daemon)) continue;  // the others stopped when they left
    try {
      slotClient(i).request(addressed({{"type", protocol::kStageAbort}}, i), std::chrono::milliseconds(2000));
    } catch (const std::exception& e) {
      spdlog::warn("job {}: could not abort {}: {}", jobId_, protocol::describeSlot(spec_, i), e.what());
    }
  }
}

std::vector<int> Coordinator::wholePipelines(std::set<std::string>& silent) {
  std::map<std::string, bool> answers;  // by daemon: one ping each
  auto answers_ = [&](int slot) {
    const std::string& daemon = protocol::placementOf(spec_, slot).daemon;
    if (!answers.count(daemon)) {
      try {
        makeClient(slot)->request({{"type", protocol::kPing}}, std::chrono::milliseconds(1000));
        answers[daemon] = true;
      } catch (const std::exception&) {
        answers[daemon] = false;
        silent.insert(daemon);
      }
    }
    return answers[daemon];
  };
  std::vector<int> whole;
  for (int r : activePipelines()) {
    bool all = true;
    for (int i = 0; i < static_cast<int>(spec_.stages.size()); ++i) all = answers_(protocol::slotOf(spec_, i, r)) && all;
    if (all) whole.push_back(r);
  }
  return whole;
}

void Coordinator::beginRejoin(int attempt) {
  abortStages();  // each copy that trains stops after the last commit
  std::vector<int> next = activePipelines();
  next.insert(next.end(), rejoining_.begin(), rejoining_.end());
  setPipelines(next);
  joiners_ = rejoining_;
  resumeFrom_ = "memory";
  healedAt_ = committed_;  // a rejoin that fails with no step committed restarts from the checkpoint
  table_.addEvent(jobId_, fmt::format("attempt {}: pipeline{} {} rejoin{} from step {}, taking the state from a healthy copy",
                                      attempt + 1, joiners_.size() == 1 ? "" : "s", fmt::join(joiners_, ", "),
                                      joiners_.size() == 1 ? "s" : "", committed_ + 2));
}

bool Coordinator::tryHeal(int attempt) {
  // A failure with no step committed since the last heal or rejoin restarts from the
  // checkpoint: it could recur without end.
  if (!protocol::heals(spec_) || committed_ < 0 || committed_ == healedAt_) return false;
  const std::vector<int> before = activePipelines();
  std::set<std::string> silent;  // daemons that did not answer: their stages free themselves
  const std::vector<int> whole = wholePipelines(silent);
  if (!fits(whole.size())) return false;
  std::vector<int> left;
  for (int r : before) {
    if (std::find(whole.begin(), whole.end(), r) == whole.end()) left.push_back(r);
  }
  // Each copy applies the last commit before it stops: what it keeps is of step committed_.
  // Not on the daemons that did not answer: each of those frees its stages when the
  // heartbeats stop, and waiting on them would hold the heal.
  abortStages(silent);
  // The row of step committed_, from the pipelines that go on (a lost copy may never report
  // it): each copy reports a step right after applying it, so it comes at once.
  table_.narrowPipelines(jobId_, whole);
  const auto until = std::chrono::steady_clock::now() + kStageReportGrace * 2;
  while (table_.progress(jobId_).stepsDone < committed_ + 1 && std::chrono::steady_clock::now() < until) {
    table_.waitForChange(jobId_, std::chrono::milliseconds(50));
  }
  if (table_.progress(jobId_).stepsDone < committed_ + 1) return false;  // restart from the checkpoint
  healedAt_ = committed_;
  setPipelines(whole);
  joiners_.clear();
  resumeFrom_ = "memory";
  const auto names = [](const std::vector<int>& p) {
    return fmt::format("pipeline{} {}", p.size() == 1 ? "" : "s", fmt::join(p, ", "));
  };
  const std::string text =
      "attempt " + std::to_string(attempt + 1) + ": healed in place from step " + std::to_string(committed_ + 2) +
      (left.empty() ? std::string(", every pipeline still whole")
                    : ": " + names(left) + " left, " + names(whole) + (whole.size() == 1 ? " carries" : " carry") +
                          " the whole batch") +
      " (no restart, no step lost)";
  table_.addEvent(jobId_, text);
  return true;
}

void Coordinator::plan(const std::vector<nlohmann::json>& profiles, int64_t step, const std::string& reason) {
  profiled_ = plannerInput(spec_, profiles);
  scheduler::PlannerInput input = profiled_;
  calibrate(input, calibration_);
  const bool fanIn = protocol::isFanIn(spec_);
  const scheduler::Plan chosen = fanIn ? scheduler::makeFanInPlan(input, spec_.maxStaleness) : scheduler::makePlan(input);
  predictedStepSeconds_ = chosen.chosen.stepSeconds;
  plannedMicroBatches_ = chosen.chosen.microBatches;
  nlohmann::json record = toJson(chosen, input);
  if (fanIn) {  // no schedule of forward and backward ops: each stage trains on its own
    record["schedule"] = "fan-in";
    for (auto& row : record["table"]) row["schedule"] = "fan-in";
    record["max_staleness"] = spec_.maxStaleness;
  }
  record["calibration"] = calibration_;
  describeStages(record, profiles);
  table_.setPlan(jobId_, std::move(record), step, reason);
  spdlog::info("job {}: plan from step {} ({}): m={} {} predicted {:.4f} s/step", jobId_, step + 1, reason,
               chosen.chosen.microBatches, scheduler::toString(chosen.chosen.schedule), chosen.chosen.stepSeconds);
  if (table_.progress(jobId_).dryRun) return;
  nlohmann::json message = {{"type", protocol::kStagePlan}, {"micro_batches", chosen.chosen.microBatches},
                             {"schedule", scheduler::toString(chosen.chosen.schedule)}, {"warmups", chosen.chosen.warmups}};
  if (!chosen.chosen.forwardCodecs.empty()) {  // the codecs the planner chose for "auto" directions, per link
    message["forward_codecs"] = chosen.chosen.forwardCodecs;
    message["backward_codecs"] = chosen.chosen.backwardCodecs;
  }
  sendToStages(message, kStageRequestTimeout);
}

bool Coordinator::requestProfiles(int64_t step) {
  try {
    sendToStages({{"type", protocol::kStageProfile}, {"at_step", step}}, kStageRequestTimeout);
    return true;
  } catch (const Error& e) {
    spdlog::warn("job {}: re-profile before step {} refused ({}); cancelling it", jobId_, step + 1, e.what());
    try {
      sendToStages({{"type", protocol::kStageProfile}, {"at_step", -1}}, kStageRequestTimeout);
    } catch (const Error&) {
    }
    return false;
  }
}

void Coordinator::run() {
  LogScope logFields({jobId_, -1, -1, -1, -1, ""});
  try {
    int attempt = resume_ ? table_.progress(jobId_).attempt + 1 : 0;
    while (true) {
      threadLogFields().attempt = attempt;
      const bool inMemory = !resumeFrom_.empty();  // a heal or a rejoin: from what the stages kept
      const std::vector<int> joining = joiners_;
      const int64_t from = inMemory ? committed_ : table_.progress(jobId_).lastCheckpoint;
      if (attempt > 0 && !inMemory) {
        table_.addEvent(jobId_, from >= 0 ? "attempt " + std::to_string(attempt) + ": resuming from the checkpoint of step " +
                                                std::to_string(from + 1)
                                          : "attempt " + std::to_string(attempt) + ": no complete checkpoint, starting over");
      }
      std::string why;
      Outcome outcome;
      try {
        outcome = runAttempt(attempt, from, why);
        resumeFrom_.clear();  // of that attempt only: the next heal or rejoin says again
        joiners_.clear();
      } catch (const PeerError& e) {
        outcome = Outcome::Retry;
        why = e.what();
      } catch (const WireError& e) {  // a bad checkpoint: fall back to the one before
        if (from < 0 && !inMemory) throw;
        if (!inMemory) table_.dropCheckpoint(jobId_, from);
        outcome = Outcome::Retry;
        why = std::string(e.what()) + "; falling back to the previous checkpoint";
      }
      const bool recurs = why.find(protocol::kNonFinite) != std::string::npos ||
                          why.find(protocol::kBadModel) != std::string::npos ||
                          why.find(protocol::kBadData) != std::string::npos ||
                          why.find(protocol::kBadSpec) != std::string::npos;
      if (outcome == Outcome::Retry && recurs) throw Error(why);
      if (outcome == Outcome::Rejoin) {
        beginRejoin(attempt);
        ++attempt;
        continue;
      }
      if (outcome == Outcome::Retry && !inMemory && from >= 0 && why.find(protocol::kBadCheckpoint) != std::string::npos) {
        table_.dropCheckpoint(jobId_, from);
        why += "; falling back to the previous checkpoint";
      }
      if (outcome == Outcome::Succeeded) {
        if (table_.progress(jobId_).dryRun) abortStages();  // profiled and planned: nothing to train
        table_.setWeightsPipeline(jobId_, activePipelines().front());  // whose copies wrote the final weights
        table_.transition(jobId_, JobState::Succeeded);
        break;
      }
      // The failure is on record before any abort, which may wait on a lost daemon, and
      // before a heal's pings.
      if (outcome == Outcome::Retry) table_.addFailure(jobId_, attempt, why);
      if (outcome == Outcome::Retry && tryHeal(attempt)) {
        ++attempt;
        continue;
      }
      resumeFrom_.clear();
      joiners_.clear();
      if (inMemory) {  // the heal or rejoin itself failed: back to the checkpoint, on the pipelines that trained
        std::vector<int> trained;
        for (int r : activePipelines()) {
          if (std::find(joining.begin(), joining.end(), r) == joining.end()) trained.push_back(r);
        }
        setPipelines(trained);
      }
      abortStages();
      if (outcome != Outcome::Retry) break;
      if (table_.progress(jobId_).dryRun) throw Error(why);
      if (table_.progress(jobId_).restarts >= spec_.failure.maxRestarts) {
        throw Error("gave up after " + std::to_string(table_.progress(jobId_).restarts) +
                    " restarts (failure.max_restarts); last: " + why);
      }
      table_.countRestart(jobId_);
      if (!waitForStages()) {
        throw Error("a stage daemon did not answer within " + fmt::format("{:g}", spec_.failure.restartTimeoutS) +
                    " s (failure.restart_timeout_s) after: " + why);
      }
      ++attempt;
    }
  } catch (const std::exception& e) {
    abortStages();
    if (!isTerminal(table_.state(jobId_))) table_.addFailure(jobId_, table_.progress(jobId_).attempt, e.what());
    table_.transition(jobId_, JobState::Failed, e.what());
  }
  spdlog::info("job {}: {}", jobId_, toString(table_.state(jobId_)));
  finished_ = true;
}

bool Coordinator::waitForStages() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(spec_.failure.restartTimeoutS);
  double backoff = 0.25;
  while (!stopping_) {
    bool all = true;
    for (int i = 0; i < slots() && all; ++i) {
      if (!isActive(i)) continue;  // a healing job's pipeline that left rejoins when it answers
      try {
        makeClient(i)->request({{"type", protocol::kPing}}, std::chrono::milliseconds(1000));
      } catch (const std::exception&) {
        all = false;
      }
    }
    if (all) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(backoff * 2, 5.0);
  }
  return false;
}

Coordinator::Outcome Coordinator::runAttempt(int attempt, int64_t fromStep, std::string& why) {
  const bool resumed = fromStep >= 0;
  table_.beginAttempt(jobId_, attempt, fromStep, pipelines_);
  committed_ = fromStep;  // the steps up to fromStep are applied everywhere
  slotClients_.clear();   // a new attempt's commits go out on new connections
  try {
    prepareAndStart(attempt, fromStep);
  } catch (const Error& e) {
    // A stage that failed while building (a bad model) reports why, and is gone by the time
    // it is started: its report, not the refused start, is the reason.
    const auto until = std::chrono::steady_clock::now() + kStageReportGrace;
    while (!table_.progress(jobId_).stageFailure && std::chrono::steady_clock::now() < until) {
      table_.waitForChange(jobId_, std::chrono::milliseconds(50));
    }
    if (auto failure = table_.progress(jobId_).stageFailure) {
      why = *failure;
      if (why.find(protocol::kBadCheckpoint) != std::string::npos) return Outcome::Retry;  // falls back a checkpoint
      throw Error(why);  // building the stage failed, and would fail again
    }
    // Never ran: an unreachable stage is the user's to fix.
    if (attempt == 0 && dynamic_cast<const PeerError*>(&e)) throw Error(e.what());
    // A heal or rejoin a daemon refused (a budget, a device): the job goes on from the checkpoint.
    if (!resumeFrom_.empty()) throw PeerError(e.what());
    throw;
  }
  std::vector<HeartbeatTarget> targets;
  std::vector<int> watched;  // the slot of each target: those that train
  for (int i = 0; i < slots(); ++i) {
    if (!isActive(i)) continue;
    watched.push_back(i);
    targets.push_back({protocol::placementOf(spec_, i).daemon, {options_.self, options_.stageKeys[i]},
                       protocol::stageOfSlot(spec_, i), protocol::replicaOfSlot(spec_, i), protocol::describeSlot(spec_, i),
                       i < static_cast<int>(admissions_.size()) ? admissions_[i] : ""});
  }
  HeartbeatMonitor heartbeats(context_, jobId_, std::move(targets), spec_.failure.heartbeatS, spec_.failure.misses);
  auto targetOf = [&](int slot) {
    return static_cast<int>(std::find(watched.begin(), watched.end(), slot) - watched.begin());
  };
  // A healing job's pipelines that do not train: once every daemon of one answers, it
  // rejoins at the next commit.
  std::vector<int> awaySlots;
  for (int i = 0; i < slots(); ++i) {
    if (!isActive(i)) awaySlots.push_back(i);
  }
  RejoinWatch away(std::move(awaySlots), spec_.failure.heartbeatS, [this](int slot) { return makeClient(slot); });
  spdlog::info("job {}: attempt {} running on {} stages{}", jobId_, attempt, spec_.stages.size(),
               !resumed          ? std::string()
               : resumeFrom_.empty() ? " from the checkpoint of step " + std::to_string(fromStep + 1)
                                     : " from the state after step " + std::to_string(fromStep + 1) + " kept in memory");  // as the event says
  int64_t profileStep = resumed ? fromStep + 1 : 0;
  std::string reason = "initial plan";
  // A resumed stage runs under its checkpoint's plan, without profiling.
  bool awaitingProfiles = !resumed;
  size_t seenSteps = static_cast<size_t>(fromStep + 1);
  scheduler::ReplanMonitor monitor(kReplanTolerance, kReplanPatience);
  // With m and the schedule both fixed by the spec, a new plan could change nothing; a
  // resumed attempt keeps its checkpoint's plan (exact resume), so it does not re-plan.
  const bool autoCodecs = spec_.compression.forward == "auto" || spec_.compression.backward == "auto";
  const bool replannable =
      (spec_.microBatches == 0 || spec_.schedule == "auto" || autoCodecs) && !resumed && !protocol::isFanIn(spec_);
  while (true) {
    table_.waitForChange(jobId_, std::chrono::milliseconds(100));
    const JobState state = table_.state(jobId_);
    if (state == JobState::Cancelled) return Outcome::Cancelled;
    if (isTerminal(state)) return Outcome::Stopped;
    const JobProgress now = table_.progress(jobId_);  // one read of the table a turn
    if (now.allStagesDone) return Outcome::Succeeded;
    if (stopping_) return Outcome::Stopped;  // this daemon shuts down: the job stays unfinished, to resume
    if (now.stageFailure) {
      why = *now.stageFailure;
      return Outcome::Retry;
    }
    for (int s : now.stagesDone) heartbeats.finished(targetOf(s));
    heartbeats.setComplete(now.lastCheckpoint);
    if (auto lost = heartbeats.lost()) {
      lost->stage = watched[lost->stage];  // a slot
      // A stage that is done may be freed before its report is read here (a fan-in's
      // producers finish first): near the job's end, give its report a moment before
      // calling it lost. Before that no stage can be done, and a loss is a loss at once.
      const auto progress = table_.progress(jobId_);
      const int64_t margin = static_cast<int64_t>(spec_.stages.size()) + spec_.maxStaleness + 2;
      const bool nearEnd = progress.stepsDone + margin >= spec_.steps;
      const auto until = std::chrono::steady_clock::now() + (nearEnd ? kStageReportGrace : std::chrono::milliseconds(0));
      while (!table_.progress(jobId_).stagesDone.count(lost->stage) && std::chrono::steady_clock::now() < until) {
        table_.waitForChange(jobId_, std::chrono::milliseconds(50));
      }
      if (table_.progress(jobId_).stagesDone.count(lost->stage)) continue;
      why = lost->why;
      return Outcome::Retry;
    }
    if (protocol::heals(spec_)) {
      while (table_.takeReady(jobId_, committed_ + 1)) {
        ++committed_;
        postToSlots({{"type", protocol::kStageCommit}, {"step", committed_}});
      }
    }
    if (!away.empty()) {
      away.poll();
      rejoining_.clear();
      for (int r = 0; r < protocol::replicaCount(spec_); ++r) {
        bool back = !isActive(protocol::slotOf(spec_, 0, r));
        for (int i = 0; i < static_cast<int>(spec_.stages.size()) && back; ++i) back = away.answering(protocol::slotOf(spec_, i, r));
        if (back) rejoining_.push_back(r);
      }
      if (!fits(activePipelines().size() + rejoining_.size())) rejoining_.clear();  // until more are back
      // Once the newest committed step's row is complete: every copy that trains has applied
      // it, and stops at the abort that follows, keeping that step's state.
      if (!rejoining_.empty() && table_.progress(jobId_).stepsDone == committed_ + 1 && committed_ + 1 < spec_.steps) {
        return Outcome::Rejoin;
      }
    }
    if (awaitingProfiles) {
      const auto profiles = table_.takeProfiles(jobId_, profileStep);
      if (!profiles) continue;
      plan(*profiles, profileStep, reason);
      if (table_.progress(jobId_).dryRun) return Outcome::Succeeded;
      awaitingProfiles = false;
      monitor.reset();
      continue;
    }
    if (!replannable) continue;
    const auto rows = table_.steps(jobId_, seenSteps);
    for (const auto& row : rows) {
      ++seenSteps;
      const int64_t step = row["step"].get<int64_t>();
      if (step <= profileStep) continue;  // the first step under a plan pays for new buffer sizes
      const double measured = row["step_s"].get<double>();
      if (!monitor.observe(predictedStepSeconds_, measured)) continue;
      const int64_t at = step + kReplanLead;
      std::vector<nlohmann::json> underPlan;
      for (const auto& r : table_.steps(jobId_, 0)) {
        if (r["step"].get<int64_t>() > profileStep) underPlan.push_back(r);
      }
      calibration_ = measuredCalibration(profiled_, plannedMicroBatches_, underPlan);
      char text[160];
      std::snprintf(text, sizeof text, "re-plan: measured %.4f s/step vs predicted %.4f s for %d steps", measured,
                    predictedStepSeconds_, kReplanPatience);
      spdlog::info("job {}: {}; profiling again before step {}", jobId_, text, at + 1);
      if (requestProfiles(at)) {
        profileStep = at;
        reason = text;
        awaitingProfiles = true;
      }
      break;
    }
  }
}

}  // namespace skytrain::daemon
