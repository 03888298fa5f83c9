#include "daemon/stage/stage_worker.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "daemon/net/replica_group.h"
#include "daemon/ops/files.h"
#include "daemon/ops/logging.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/failures.h"
#include "daemon/protocol/messages.h"
#include "daemon/stage/checkpoint.h"
#include "daemon/stage/loss_scaler.h"
#include "daemon/stage/pipeline_runner.h"
#include "daemon/stage/weight_export.h"
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
  aborted_ = true;
  startSignal_.notify_all();
}

void StageWorker::deliverPlan(const RunPlan& plan) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    plan_ = plan;
  }
  startSignal_.notify_all();
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
  try {
    PipelineRunner runner(a.spec, a.stage, a.jobKey, a.memoryBudgetBytes, a.replica);
    runner.setAbortCheck([this] { return aborted_.load(); });
    int firstStep = 0;
    if (a.resumeStep >= 0) {
      try {
        runner.restore(loadCheckpoint(a.jobDir, a.jobId, a.resumeStep, a.stage));
      } catch (const WireError& e) {
        throw WireError(std::string(protocol::kBadCheckpoint) + e.what());
      }
      firstStep = static_cast<int>(a.resumeStep) + 1;
      std::lock_guard<std::mutex> lock(mutex_);
      profileAt_ = -1;  // the checkpoint's plan stands: a resumed run repeats the original exactly
      spdlog::info("job {} {}: restored the checkpoint of step {} (attempt {})", a.jobId, name, a.resumeStep + 1,
                   a.attempt);  // counted from 1, as the coordinator's event says
    }
    if (a.resumeStep >= 0 && complete_ < a.resumeStep) complete_ = a.resumeStep;  // complete: it was resumed from
    CheckpointWriter writer(a.jobDir, a.stage, a.spec.checkpoint.keep, [this] { return complete_.load(); });
    runner.setUpdateFence([&writer] { writer.awaitReleased(); });
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
    if (protocol::replicaCount(a.spec) > 1) {
      ReplicaGroupOptions o;
      o.coordinator = a.coordinator;
      o.security = {a.self, a.coordinatorKey};
      o.job = a.jobId;
      o.stage = a.stage;
      o.replica = a.replica;
      o.replicas = protocol::replicaCount(a.spec);
      o.attempt = n.groupAttempt;
      o.privateAddress = a.privateAddress;
      o.device = a.device;
      o.timeoutS = std::max(60.0, a.spec.peerTimeoutS);
      o.aborted = [this] { return aborted_.load(); };
      const auto start = Clock::now();
      auto group = std::make_unique<ReplicaGroup>(context_, o);
      spdlog::info("job {} {}: met its {} copies over c10d {} on {} in {:.2f} s", a.jobId, name, o.replicas, group->backend(), a.privateAddress, secondsSince(start));
      runner.setReplicaGroup(std::move(group));
    }
    spdlog::info("job {} {}: running steps {}..{}", a.jobId, name, firstStep + 1, a.spec.steps);
    const int steps = a.spec.steps;
    for (int step = firstStep; step < steps; ++step) {
      threadLogFields().step = step + 1;
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
      if (!std::isnan(stats.loss)) message.loss = stats.loss;
      message.stepSeconds = stats.stepSeconds;
      message.computeSeconds = stats.computeSeconds;
      message.bytesSent = static_cast<double>(stats.bytesSent);
      message.bytesRaw = static_cast<double>(stats.bytesRaw);
      message.bytesBackward = static_cast<double>(stats.bytesBackward);
      message.rawBackward = static_cast<double>(stats.rawBackward);
      message.microBatches = runner.microBatches();
      message.checkpointSeconds = checkpointSeconds;
      message.lr = stats.lr;
      message.skipped = stats.skipped;
      message.lead = stats.lead;
      report(std::move(message));
      confirmCheckpoints(writer);
      const int interval = a.spec.eval.interval;
      const bool validates = last || (interval > 0 && (step + 1) % interval == 0);
      if (validates) runner.drain();  // every copy: the drain exchanges norms along its own pipeline
      if (a.replica == 0 && validates) {  // replica 0's pipeline validates
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
  } catch (const Aborted&) {
    spdlog::info("job {} {}: aborted", a.jobId, name);
  } catch (const std::exception& e) {
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
  finished_ = true;
}

}  // namespace skytrain::daemon
