#include "daemon/stage_worker.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "daemon/files.h"
#include "daemon/pipeline_runner.h"
#include "daemon/protocol/control.h"
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

void StageWorker::start(const std::string& previousData, const std::string& nextData) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    previousData_ = previousData;
    nextData_ = nextData;
    started_ = true;
  }
  startSignal_.notify_all();
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
  startSignal_.wait(lock, [this] { return started_ || aborted_; });
  return !aborted_;
}

void StageWorker::run() {
  const auto& a = assignment_;
  protocol::ControlClient coordinator(context_, a.coordinator);
  auto report = [&](const std::string& kind, protocol::Json fields) {
    fields["type"] = protocol::kStageReport;
    fields["job"] = a.jobId;
    fields["stage"] = a.stage;
    fields["kind"] = kind;
    coordinator.post(fields);
  };
  try {
    PipelineRunner runner(a.spec, a.stage, a.jobKey, a.memoryBudgetBytes);
    runner.setAbortCheck([this] { return aborted_.load(); });
    if (!waitForStart()) throw Aborted{};
    runner.connect(runner.isFirst() ? nullptr : makeZmqPeerLink(context_, previousData_, mailbox_->fromPrevious),
                   runner.isLast() ? nullptr : makeZmqPeerLink(context_, nextData_, mailbox_->fromNext));
    spdlog::info("job {} stage {}: running {} steps", a.jobId, a.stage, a.spec.steps);
    const int steps = a.spec.steps;
    for (int step = 0; step < steps; ++step) {
      if (aborted_) throw Aborted{};
      if (profileDue(step)) {
        report("profile", {{"step", step}, {"profile", runner.profile(static_cast<uint64_t>(step))}});
        const RunPlan plan = waitForPlan();
        runner.setPlan(plan);
        spdlog::info("job {} stage {}: from step {}: m={} {}", a.jobId, a.stage, step, plan.microBatches,
                     scheduler::toString(plan.schedule));
      }
      const StepStats stats = runner.runStep(static_cast<uint64_t>(step));
      report("step", {{"step", step},
                      {"loss", std::isnan(stats.loss) ? protocol::Json(nullptr) : protocol::Json(stats.loss)},
                      {"step_s", stats.stepSeconds},
                      {"compute_s", stats.computeSeconds},
                      {"bytes_sent", stats.bytesSent},
                      {"micro_batches", runner.microBatches()},
                      {"bytes_raw", stats.bytesRaw}});
      const bool last = step + 1 == steps;
      const int interval = a.spec.eval.interval;
      if (last || (interval > 0 && (step + 1) % interval == 0)) {
        if (auto loss = runner.runEval(static_cast<uint64_t>(step))) report("eval", {{"step", step}, {"loss", *loss}});
      }
    }
    writeFileAtomic(a.jobDir + "/stage-" + std::to_string(a.stage) + ".pt", runner.serializedState());
    report("done", protocol::Json::object());
    spdlog::info("job {} stage {}: done", a.jobId, a.stage);
  } catch (const Aborted&) {
    spdlog::info("job {} stage {}: aborted", a.jobId, a.stage);
  } catch (const std::exception& e) {
    spdlog::error("job {} stage {}: failed: {}", a.jobId, a.stage, e.what());
    report("failed", {{"error", e.what()}});
  }
  finished_ = true;
}

}  // namespace skytrain::daemon
