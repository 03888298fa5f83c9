#include "daemon/stage/stage_worker.h"

#include <spdlog/spdlog.h>

#include "daemon/net/replica_group.h"
#include "daemon/ops/files.h"
#include "daemon/ops/logging.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/failures.h"
#include "daemon/protocol/messages.h"
#include "daemon/stage/state/checkpoint.h"
#include "daemon/stage/update/loss_scaler.h"
#include "daemon/stage/runner/pipeline_runner.h"
#include "daemon/stage/weight_export.h"

#include <algorithm>
#include "scheduler/error.h"

namespace skytrain::daemon {

StageWorker::StageWorker(zmq::context_t& context, StageAssignment assignment, std::shared_ptr<Mailbox> mailbox)
    : context_(context), assignment_(std::move(assignment)), mailbox_(std::move(mailbox)) {
  thread_ = std::thread([this] { run(); });
}

StageWorker::~StageWorker() {
  abort();
  if (thread_.joinable()) thread_.join();
}

void StageWorker::start(const protocol::StageStart& neighbours) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (started_) return;  // the neighbours are fixed once
    neighbours_ = neighbours;
    started_ = true;
  }
  startSignal_.notify_all();
}

double StageWorker::secondsSinceHeartbeat() const {
  return std::chrono::duration<double>(Clock::now() - Clock::time_point(Clock::duration(lastHeartbeat_.load()))).count();
}

void StageWorker::abort() {
  {
    std::lock_guard<std::mutex> lock(mutex_);  // a waiter checks the flag under it: no lost wake-up
    aborted_ = true;
  }
  startSignal_.notify_all();
}

void StageWorker::deliverPlan(const RunPlan& plan) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    plan_ = plan;
  }
  startSignal_.notify_all();
}

void StageWorker::commit(int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    committed_ = std::max(committed_, step);
  }
  startSignal_.notify_all();
}

void StageWorker::awaitCommit(int64_t step) {
  std::unique_lock<std::mutex> lock(mutex_);
  // No timeout of its own: a coordinator that goes silent is noticed by the heartbeats
  // (StageHost::reap), which abort the stage.
  startSignal_.wait(lock, [&] { return committed_ >= step || aborted_; });
  if (committed_ < step) throw Aborted{};
  applying_ = true;  // until the update is in: a failure meanwhile leaves no state to keep
}

void StageWorker::shareState(PipelineRunner& runner, ReplicaGroup& group, int64_t step, bool holds) {
  const auto& a = assignment_;
  at::Tensor holders = at::zeros({group.size()}, at::TensorOptions().dtype(at::kLong).device(c10::Device(a.device)));
  if (holds) holders[group.rank()].fill_(1);
  group.sum(holders);
  const at::Tensor counts = holders.cpu();
  int root = -1, missing = 0;
  for (int r = 0; r < group.size(); ++r) {
    if (counts[r].item<int64_t>() > 0 && root < 0) root = r;
    missing += counts[r].item<int64_t>() == 0;
  }
  if (missing == 0) return;
  if (root < 0) throw PeerError("no copy of the stage has its state to share");
  const auto start = Clock::now();
  SnapshotBytes bytes;
  if (group.rank() == root) bytes = encodeSnapshot(runner.snapshot(a.jobId, step));
  group.broadcastBytes(bytes.meta, root, kMaxCheckpointMetaBytes);
  // A stage's state is its weights, AdamW moments and small extras: within twice what
  // admission counted for it, whatever the sender says.
  group.broadcastBytes(bytes.tensors, root, static_cast<size_t>(2 * a.admittedBytes) + (size_t{64} << 20));
  if (holds) return;
  const std::string from = "the state of step " + std::to_string(step + 1) + " from copy " + std::to_string(root);
  const size_t size = bytes.meta.size() + bytes.tensors.size();
  runner.restore(decodeSnapshot(bytes.meta, std::make_shared<const std::string>(std::move(bytes.tensors)), a.jobId, step,
                                a.stage, from, from));
  applied_ = step;
  appliedExtras_ = runner.extras();
  spdlog::info("job {} stage {} replica {}: took {} ({} bytes) in {:.2f} s", a.jobId, a.stage, a.replica, from, size,
               secondsSince(start));
}

bool StageWorker::requestProfile(int atStep) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (atStep < 0) {  // cancel one not yet begun
    if (profileAt_ > currentStep_) profileAt_ = -1;
    return true;
  }
  if (atStep <= currentStep_ || atStep >= assignment_.spec.steps) return false;
  profileAt_ = atStep;
  return true;
}

bool StageWorker::profileDue(int step) {
  std::lock_guard<std::mutex> lock(mutex_);
  currentStep_ = step;
  return step == profileAt_;
}

RunPlan StageWorker::waitForPlan() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto timeout = std::chrono::duration<double>(std::max(60.0, assignment_.spec.peerTimeoutS));
  if (!startSignal_.wait_for(lock, timeout, [this] { return plan_.has_value() || aborted_; })) {
    throw PeerError("no plan from the coordinator within " + std::to_string(static_cast<int>(timeout.count())) + " s");
  }
  if (aborted_) throw Aborted{};
  RunPlan plan = *plan_;
  plan_.reset();
  profileAt_ = -1;
  return plan;
}

bool StageWorker::waitForStart() {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto timeout = std::chrono::duration<double>(assignment_.prepareTimeoutS);
  if (!startSignal_.wait_for(lock, timeout, [this] { return started_ || aborted_; })) {
    throw PeerError("prepared but not started within " + fmt::format("{:g}", assignment_.prepareTimeoutS) +
                    " s (prepare_timeout_s); freed");
  }
  return !aborted_;
}

void StageWorker::run() {
  const auto& a = assignment_;
  LogScope logFields({a.jobId, a.stage, a.replica, a.attempt, -1, ""});
  const std::string name = protocol::describeSlot(a.spec, protocol::slotOf(a.spec, a.stage, a.replica));  // for the log
  std::unique_ptr<protocol::ControlClient> coordinator;
  try {
    coordinator = std::make_unique<protocol::ControlClient>(context_, a.coordinator,
                                                            protocol::ClientSecurity{a.self, a.coordinatorKey});
  } catch (const std::exception& e) {
    spdlog::error("job {} {}: cannot reach the coordinator at {}: {}", a.jobId, name, a.coordinator, e.what());
    finished_ = true;
    return;
  }
  auto report = [&](protocol::StageReport message) {
    message.job = a.jobId;
    message.stage = a.stage;
    message.replica = a.replica;
    message.attempt = a.attempt;
    try {
      coordinator->post(protocol::toJson(message));
    } catch (const std::exception& e) {
      spdlog::warn("job {} {}: report not sent: {}", a.jobId, name, e.what());
    }
  };
  auto simple = [](protocol::ReportKind kind, int64_t step) {
    protocol::StageReport message;
    message.kind = kind;
    message.step = step;
    return message;
  };
  auto confirmCheckpoints = [&](CheckpointWriter& writer) {
    for (int64_t step : writer.takeWritten()) report(simple(protocol::ReportKind::Checkpoint, step));
    for (auto& [step, why] : writer.takeFailed()) {  // not confirmed; the coordinator records why
      spdlog::warn("job {} {}: checkpoint of step {} not written: {}", a.jobId, name, step + 1, why);
      auto failed = simple(protocol::ReportKind::Checkpoint, step);
      failed.error = why;
      report(failed);
    }
  };
  const bool heals = protocol::heals(a.spec);
  std::unique_ptr<PipelineRunner> built;  // outside the try: a healing stage that stops keeps its state
  bool holdsState = a.resumeFrom != "peer";
  try {
    built = std::make_unique<PipelineRunner>(a.spec, a.stage, a.jobKey, a.memoryBudgetBytes, a.replica, a.pipelines);
    PipelineRunner& runner = *built;
    runner.setAbortCheck([this] { return aborted_.load(); });
    int firstStep = 0;
    if (a.resumeStep >= 0 && a.resumeFrom.empty()) {
      try {
        runner.restore(loadCheckpoint(a.jobDir, a.jobId, a.resumeStep, a.stage));
      } catch (const WireError& e) {
        throw WireError(std::string(protocol::kBadCheckpoint) + e.what());
      }
      spdlog::info("job {} {}: restored the checkpoint of step {} (attempt {})", a.jobId, name, a.resumeStep + 1,
                   a.attempt);  // counted from 1, as the coordinator's event says
    } else if (a.resumeFrom == "memory") {
      std::string missing = "this daemon kept none (it restarted, or never had any)";
      auto kept = a.restoreFrom ? a.restoreFrom->take(a.resumeStep, std::chrono::seconds(60),
                                                      [this] { return aborted_.load(); }, missing)
                                : std::nullopt;
      if (kept) {
        runner.restore(*kept);
        spdlog::info("job {} {}: took its state after step {} from memory (attempt {})", a.jobId, name,
                     a.resumeStep + 1, a.attempt);
      } else {  // a healthy copy sends it once the copies meet
        holdsState = false;
        spdlog::info("job {} {}: no state after step {} in memory ({}); it comes from a healthy copy", a.jobId, name,
                     a.resumeStep + 1, missing);
      }
    }
    if (heals) appliedExtras_ = runner.extras();  // the state beside the weights, as of applied_
    if (a.resumeStep >= 0) {
      firstStep = static_cast<int>(a.resumeStep) + 1;
      applied_ = a.resumeStep;
      std::lock_guard<std::mutex> lock(mutex_);
      profileAt_ = -1;  // the checkpoint's plan stands: a resumed run repeats the original exactly
    }
    if (a.resumeStep >= 0 && complete_ < a.resumeStep) complete_ = a.resumeStep;  // complete: it was resumed from
    CheckpointWriter writer(a.jobDir, a.stage, a.spec.checkpoint.keep, [this] { return complete_.load(); });
    int64_t running = firstStep;  // the step the fence below is in
    runner.setUpdateFence([&] {
      writer.awaitReleased();
      if (!heals) return;
      report(simple(protocol::ReportKind::Ready, running));  // this stage's gradients are averaged
      awaitCommit(running);
    });
    if (!waitForStart()) throw Aborted{};
    const auto& n = neighbours_;
    const double liveness = a.spec.failure.lostAfterS();  // as long as a silent daemon is given
    if (!n.producers.empty()) {  // a fan-in's consumer: every producer's frames share one queue
      std::vector<std::unique_ptr<PeerLink>> producers;
      for (const auto& p : n.producers) {
        producers.push_back(makeZmqPeerLink(context_, p.endpoint, {a.self, p.key}, mailbox_->fromPrevious, liveness));
      }
      runner.connectProducers(std::move(producers));
    } else {
      runner.connect(n.previous.empty() ? nullptr
                                        : makeZmqPeerLink(context_, n.previous, {a.self, n.previousKey},
                                                          mailbox_->fromPrevious, liveness),
                     n.next.empty() ? nullptr
                                    : makeZmqPeerLink(context_, n.next, {a.self, n.nextKey}, mailbox_->fromNext, liveness));
    }
    const std::vector<int>& pipelines = a.pipelines;
    if (protocol::replicaCount(a.spec) > 1) {
      ReplicaGroupOptions o;
      o.coordinator = a.coordinator;
      o.security = {a.self, a.coordinatorKey};
      o.job = a.jobId;
      o.stage = a.stage;
      o.replica = a.replica;
      o.rank = static_cast<int>(std::find(pipelines.begin(), pipelines.end(), a.replica) - pipelines.begin());
      o.size = static_cast<int>(pipelines.size());
      o.attempt = n.groupAttempt;
      o.privateAddress = a.privateAddress;
      o.device = a.device;
      o.timeoutS = std::max(60.0, a.spec.peerTimeoutS);
      o.aborted = [this] { return aborted_.load(); };
      const auto start = Clock::now();
      auto group = std::make_unique<ReplicaGroup>(context_, o);
      spdlog::info("job {} {}: met its {} copies over c10d {} on {} in {:.2f} s", a.jobId, name, o.size, group->backend(), a.privateAddress, secondsSince(start));
      if (heals) shareState(runner, *group, a.resumeStep, holdsState);
      holdsState = true;
      runner.setReplicaGroup(std::move(group));
    }
    spdlog::info("job {} {}: running steps {}..{}", a.jobId, name, firstStep + 1, a.spec.steps);
    const int steps = a.spec.steps;
    for (int step = firstStep; step < steps; ++step) {
      threadLogFields().step = step + 1;
      running = step;
      if (aborted_) throw Aborted{};
      if (profileDue(step)) {
        runner.drain();  // the delayed update's last round ends before the probes
        auto message = simple(protocol::ReportKind::Profile, step);
        message.profile = runner.profile(static_cast<uint64_t>(step));
        report(std::move(message));
        const RunPlan plan = waitForPlan();
        runner.setPlan(plan);
        spdlog::info("job {} {}: from step {}: m={} {}", a.jobId, name, step + 1, plan.microBatches,
                     scheduler::toString(plan.schedule));
      }
      const StepStats stats = runner.runStep(static_cast<uint64_t>(step));
      if (heals) {  // applied: what a stop keeps is now of this step
        applied_ = step;
        applying_ = false;
        appliedExtras_ = runner.extras();
      }
      if (stats.skipped && stats.lossScale > 0 && a.stage == 0 && a.replica == 0) {  // every stage skipped: one line
        spdlog::info("job {} {}: step {}: the gradients overflowed; every stage skips the step, and the loss scale "
                     "halves to {}", a.jobId, name, step + 1, describeScale(stats.lossScale));
      }
      const bool last = step + 1 == steps;
      const int every = a.spec.checkpoint.interval;
      double checkpointSeconds = 0;
      if (last) runner.flush();  // the delayed update's pending gradients: the final weights have them
      if (last || (every > 0 && (step + 1) % every == 0)) {
        runner.drain();
        const auto start = Clock::now();
        writer.write(step, runner.snapshot(a.jobId, step));  // a copy; written in the background
        checkpointSeconds = secondsSince(start);
      }
      auto message = simple(protocol::ReportKind::Step, step);
      addStepFields(stats, message);
      message.microBatches = runner.microBatches();
      message.checkpointSeconds = checkpointSeconds;
      report(std::move(message));
      confirmCheckpoints(writer);
      const int interval = a.spec.eval.interval;
      const bool validates = last || (interval > 0 && (step + 1) % interval == 0);
      if (validates) runner.drain();  // every copy: the drain exchanges norms along its own pipeline
      if (a.replica == pipelines.front() && validates) {  // the first pipeline that trains validates
        if (auto loss = runner.runEval(static_cast<uint64_t>(step))) {
          auto eval = simple(protocol::ReportKind::Eval, step);
          eval.loss = *loss;
          eval.accuracy = runner.evalAccuracy();
          eval.bleu = runner.evalBleu();
          report(std::move(eval));
        }
      }
    }
    writer.drain();
    confirmCheckpoints(writer);
    // Each streamed from the weights: the end of a job holds no second copy of them.
    {
      const std::vector<char> pickled = runner.serializedState();
      writeFileAtomic(a.jobDir + "/stage-" + std::to_string(a.stage) + ".pt",
                      [&](const ByteSink& sink) { sink(pickled.data(), pickled.size()); });
    }
    writeFileAtomic(finalWeightsPath(a.jobDir, a.stage),
                    [&](const ByteSink& sink) { stages::writeSafetensors(runner.weights(), sink); });
    report(simple(protocol::ReportKind::Done, steps));
    spdlog::info("job {} {}: done", a.jobId, name);
    holdsState = false;  // finished: nothing to keep
  } catch (const Aborted&) {
    spdlog::info("job {} {}: aborted", a.jobId, name);
  } catch (const std::exception& e) {
    if (aborted_) {  // a wait the abort broke (a collective, a frame): not a failure of its own
      spdlog::info("job {} {}: aborted ({})", a.jobId, name, e.what());
      keepState(built.get(), holdsState);
      built.reset();  // see below
      finished_ = true;
      return;
    }
    // LibTorch's errors carry a C++ backtrace: the user gets the message without it.
    const auto* torchError = dynamic_cast<const c10::Error*>(&e);
    std::string message = torchError ? torchError->what_without_backtrace() : e.what();
    // What a restart would meet again is said so, for the coordinator not to retry it.
    if (dynamic_cast<const SpecError*>(&e)) {
      message = protocol::kBadSpec + message;
    } else if (dynamic_cast<const DataError*>(&e)) {  // "data: ..." from the data sources
      message = protocol::kBadData + message.substr(std::string("data: ").size());
    }
    spdlog::error("job {} {}: failed: {}", a.jobId, name, message);
    auto failed = simple(protocol::ReportKind::Failed, 0);
    failed.error = message.substr(0, protocol::kMaxErrorLength);
    report(std::move(failed));
  }
  keepState(built.get(), holdsState);
  // Torn down here, before finished_: a replica group's collective abandoned on a hung
  // peer holds its destructor until c10d's timeout, and the control thread, which joins
  // finished workers, must never wait for that.
  built.reset();
  finished_ = true;
}

void StageWorker::keepState(PipelineRunner* runner, bool holdsState) {
  const auto& a = assignment_;
  if (!a.keep) return;
  std::optional<StageSnapshot> state;
  if (runner && holdsState && !applying_ && applied_ >= 0) {
    try {
      // The weights themselves, no copy (the runner goes now), and the rest as it was when
      // that step was applied: a half-run step moved the RNG, the codecs' and decoders'
      // state and the loss scale since.
      state = runner->snapshot(a.jobId, applied_, &appliedExtras_);
    } catch (const std::exception& e) {
      spdlog::warn("job {} stage {} replica {}: its state could not be kept: {}", a.jobId, a.stage, a.replica, e.what());
    }
  }
  a.keep->deposit(applied_, std::move(state));
}

}  // namespace skytrain::daemon
