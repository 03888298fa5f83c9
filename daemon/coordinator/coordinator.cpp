#include "daemon/coordinator/coordinator.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

#include "daemon/coordinator/heartbeat.h"
#include "daemon/coordinator/rejoin_watch.h"
#include "daemon/coordinator/replanner.h"
#include "daemon/ops/logging.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/failures.h"
#include "daemon/protocol/printable.h"
#include "daemon/protocol/messages.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

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
      resume_(resume),
      fleet_(context_, spec_, jobId_, options_.self, options_.stageKeys) {
  thread_ = std::thread([this] { run(); });
}

Coordinator::~Coordinator() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void Coordinator::prepareAndStart(int attempt, int64_t fromStep) {
  const int stages = static_cast<int>(spec_.stages.size());
  std::vector<std::string> data(fleet_.slots());
  // What each slot's stage outputs a sample, where it reported it: the next stage's
  // input_shape when the spec leaves it out (a TorchScript stage after the first).
  std::vector<std::vector<int64_t>> outputs(fleet_.slots());
  const std::string owner = table_.owner(jobId_).first;  // who may export the stages' weights
  const std::string proof = table_.proof(jobId_);
  for (int i = 0; i < fleet_.slots(); ++i) {
    if (!fleet_.isActive(i)) continue;
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
      prepare.pipelines = fleet_.pipelines();
      const auto reply =
          protocol::parsePrepareReply(fleet_.connect(i)->request(protocol::toJson(prepare), StageFleet::kRequestTimeout));
      data[i] = reply.dataEndpoint;
      outputs[i] = reply.outputShape;
      admissions_.resize(fleet_.slots());
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
  for (int slot = fleet_.slots() - 1; slot >= 0; --slot) {
    if (!fleet_.isActive(slot)) continue;
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
    fleet_.connect(slot)->request(protocol::toJson(start), StageFleet::kRequestTimeout);
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

bool Coordinator::fits(size_t pipelines) const {
  // The batch splits over them, and a copy's share into the plan's micro-batches of the same
  // size: m * R / P of them (PipelineRunner::setPlan).
  const int p = static_cast<int>(pipelines), m = std::max(1, table_.progress(jobId_).microBatches);
  return p > 0 && spec_.batchSize % p == 0 && (m * protocol::replicaCount(spec_)) % p == 0;
}

void Coordinator::beginRejoin(int attempt) {
  fleet_.abort();  // each copy that trains stops after the last commit
  std::vector<int> next = fleet_.activePipelines();
  next.insert(next.end(), rejoining_.begin(), rejoining_.end());
  fleet_.setPipelines(next);
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
  const std::vector<int> before = fleet_.activePipelines();
  std::set<std::string> silent;  // daemons that did not answer: their stages free themselves
  const std::vector<int> whole = fleet_.wholePipelines(silent);
  if (!fits(whole.size())) return false;
  std::vector<int> left;
  for (int r : before) {
    if (std::find(whole.begin(), whole.end(), r) == whole.end()) left.push_back(r);
  }
  // Each copy applies the last commit before it stops: what it keeps is of step committed_.
  // Not on the daemons that did not answer: each of those frees its stages when the
  // heartbeats stop, and waiting on them would hold the heal.
  fleet_.abort(silent);
  // The row of step committed_, from the pipelines that go on (a lost copy may never report
  // it): each copy reports a step right after applying it, so it comes at once.
  table_.narrowPipelines(jobId_, whole);
  const auto until = std::chrono::steady_clock::now() + kStageReportGrace * 2;
  while (table_.progress(jobId_).stepsDone < committed_ + 1 && std::chrono::steady_clock::now() < until) {
    table_.waitForChange(jobId_, std::chrono::milliseconds(50));
  }
  if (table_.progress(jobId_).stepsDone < committed_ + 1) return false;  // restart from the checkpoint
  healedAt_ = committed_;
  fleet_.setPipelines(whole);
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
        if (table_.progress(jobId_).dryRun) fleet_.abort();  // profiled and planned: nothing to train
        table_.setWeightsPipeline(jobId_, fleet_.activePipelines().front());  // whose copies wrote the final weights
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
        for (int r : fleet_.activePipelines()) {
          if (std::find(joining.begin(), joining.end(), r) == joining.end()) trained.push_back(r);
        }
        fleet_.setPipelines(trained);
      }
      fleet_.abort();
      if (outcome != Outcome::Retry) break;
      if (table_.progress(jobId_).dryRun) throw Error(why);
      if (table_.progress(jobId_).restarts >= spec_.failure.maxRestarts) {
        throw Error("gave up after " + std::to_string(table_.progress(jobId_).restarts) +
                    " restarts (failure.max_restarts); last: " + why);
      }
      table_.countRestart(jobId_);
      if (!fleet_.waitUntilAnswering(std::chrono::duration<double>(spec_.failure.restartTimeoutS), stopping_)) {
        throw Error("a stage daemon did not answer within " + fmt::format("{:g}", spec_.failure.restartTimeoutS) +
                    " s (failure.restart_timeout_s) after: " + why);
      }
      ++attempt;
    }
  } catch (const std::exception& e) {
    fleet_.abort();
    if (!isTerminal(table_.state(jobId_))) table_.addFailure(jobId_, table_.progress(jobId_).attempt, e.what());
    table_.transition(jobId_, JobState::Failed, e.what());
  }
  spdlog::info("job {}: {}", jobId_, toString(table_.state(jobId_)));
  finished_ = true;
}

Coordinator::Outcome Coordinator::runAttempt(int attempt, int64_t fromStep, std::string& why) {
  const bool resumed = fromStep >= 0;
  table_.beginAttempt(jobId_, attempt, fromStep, fleet_.pipelines());
  committed_ = fromStep;  // the steps up to fromStep are applied everywhere
  fleet_.dropConnections();  // a new attempt's commits go out on new connections
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
  for (int i = 0; i < fleet_.slots(); ++i) {
    if (!fleet_.isActive(i)) continue;
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
  for (int i = 0; i < fleet_.slots(); ++i) {
    if (!fleet_.isActive(i)) awaySlots.push_back(i);
  }
  RejoinWatch away(std::move(awaySlots), spec_.failure.heartbeatS, [this](int slot) { return fleet_.connect(slot); });
  spdlog::info("job {}: attempt {} running on {} stages{}", jobId_, attempt, spec_.stages.size(),
               !resumed          ? std::string()
               : resumeFrom_.empty() ? " from the checkpoint of step " + std::to_string(fromStep + 1)
                                     : " from the state after step " + std::to_string(fromStep + 1) + " kept in memory");  // as the event says
  Replanner planner(table_, spec_, jobId_, fleet_, calibration_, fromStep);
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
        fleet_.post({{"type", protocol::kStageCommit}, {"step", committed_}});
      }
    }
    if (!away.empty()) {
      away.poll();
      rejoining_.clear();
      for (int r = 0; r < protocol::replicaCount(spec_); ++r) {
        bool back = !fleet_.isActive(protocol::slotOf(spec_, 0, r));
        for (int i = 0; i < static_cast<int>(spec_.stages.size()) && back; ++i) back = away.answering(protocol::slotOf(spec_, i, r));
        if (back) rejoining_.push_back(r);
      }
      if (!fits(fleet_.activePipelines().size() + rejoining_.size())) rejoining_.clear();  // until more are back
      // Once the newest committed step's row is complete: every copy that trains has applied
      // it, and stops at the abort that follows, keeping that step's state.
      if (!rejoining_.empty() && table_.progress(jobId_).stepsDone == committed_ + 1 && committed_ + 1 < spec_.steps) {
        return Outcome::Rejoin;
      }
    }
    if (planner.poll()) return Outcome::Succeeded;  // a dry run, planned
  }
}

}  // namespace skytrain::daemon
