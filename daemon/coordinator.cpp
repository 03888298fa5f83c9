#include "daemon/coordinator.h"

#include <spdlog/spdlog.h>

#include <map>
#include <memory>

#include "daemon/planning.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/messages.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

constexpr std::chrono::milliseconds kStageRequestTimeout{5000};
// Re-plan when measured step times are more than 20% off the prediction for 5 steps in a
// row; the stages profile again kReplanLead steps later, at a boundary none has reached.
constexpr double kReplanTolerance = 0.2;
constexpr int kReplanPatience = 5;
constexpr int64_t kReplanLead = 3;

}  // namespace

Coordinator::Coordinator(zmq::context_t& context, JobTable& table, std::string jobId, protocol::JobSpec spec,
                         std::string specText, CoordinatorOptions options)
    : context_(context),
      table_(table),
      jobId_(std::move(jobId)),
      spec_(std::move(spec)),
      specText_(std::move(specText)),
      options_(std::move(options)) {
  thread_ = std::thread([this] { run(); });
}

Coordinator::~Coordinator() {
  stop();
  if (thread_.joinable()) thread_.join();
}

protocol::ControlClient Coordinator::clientFor(int stage) {
  return protocol::ControlClient(context_, spec_.stages[stage].daemon, {options_.self, options_.stageKeys[stage]});
}

void Coordinator::prepareAndStart() {
  const int stages = static_cast<int>(spec_.stages.size());
  std::vector<std::string> data(stages);
  for (int i = 0; i < stages; ++i) {
    try {
      protocol::StagePrepare prepare;
      prepare.job = jobId_;
      prepare.stage = i;
      prepare.spec = specText_;
      prepare.coordinator = options_.selfControl;
      const auto reply = clientFor(i).request(protocol::toJson(prepare), kStageRequestTimeout);
      data[i] = reply.at("data_endpoint").get<std::string>();
    } catch (const std::exception& e) {
      throw PeerError("stage " + std::to_string(i) + " (" + spec_.stages[i].daemon + "): " + e.what());
    }
  }
  // Last stage first: a stage accepts frames only once it knows its neighbours, and frames
  // flow downstream first (probes, activations), so each receiver is ready before its sender.
  for (int i = stages - 1; i >= 0; --i) {
    protocol::StageStart start;
    start.job = jobId_;
    start.stage = i;
    if (i > 0) start.previous = data[i - 1], start.previousKey = options_.stageKeys[i - 1];
    if (i + 1 < stages) start.next = data[i + 1], start.nextKey = options_.stageKeys[i + 1];
    clientFor(i).request(protocol::toJson(start), kStageRequestTimeout);
  }
}

void Coordinator::sendToStages(const nlohmann::json& message, std::chrono::milliseconds timeout) {
  for (int i = 0; i < static_cast<int>(spec_.stages.size()); ++i) {
    nlohmann::json m = message;
    m["job"] = jobId_;
    m["stage"] = i;
    clientFor(i).request(m, timeout);
  }
}

void Coordinator::plan(const std::vector<nlohmann::json>& profiles, int64_t step, const std::string& reason) {
  profiled_ = plannerInput(spec_, profiles);
  scheduler::PlannerInput input = profiled_;
  calibrate(input, calibration_);
  const scheduler::Plan chosen = scheduler::makePlan(input);
  predictedStepSeconds_ = chosen.chosen.stepSeconds;
  plannedMicroBatches_ = chosen.chosen.microBatches;
  nlohmann::json record = toJson(chosen, input);
  record["calibration"] = calibration_;
  table_.setPlan(jobId_, std::move(record), step, reason);
  spdlog::info("job {}: plan from step {} ({}): m={} {} predicted {:.4f} s/step", jobId_, step, reason,
               chosen.chosen.microBatches, scheduler::toString(chosen.chosen.schedule), chosen.chosen.stepSeconds);
  if (table_.dryRun(jobId_)) return;
  sendToStages({{"type", protocol::kStagePlan}, {"micro_batches", chosen.chosen.microBatches},
                {"schedule", scheduler::toString(chosen.chosen.schedule)}, {"warmups", chosen.chosen.warmups}},
               kStageRequestTimeout);
}

bool Coordinator::requestProfiles(int64_t step) {
  try {
    sendToStages({{"type", protocol::kStageProfile}, {"at_step", step}}, kStageRequestTimeout);
    return true;
  } catch (const Error& e) {
    spdlog::warn("job {}: re-profile before step {} refused ({}); cancelling it", jobId_, step, e.what());
    try {
      sendToStages({{"type", protocol::kStageProfile}, {"at_step", -1}}, kStageRequestTimeout);
    } catch (const Error&) {
    }
    return false;
  }
}

void Coordinator::run() {
  try {
    prepareAndStart();
    table_.transition(jobId_, JobState::Running);
    spdlog::info("job {}: running on {} stages", jobId_, spec_.stages.size());
    int64_t profileStep = 0;
    std::string reason = "initial plan";
    bool awaitingProfiles = true;
    size_t seenSteps = 0;
    scheduler::ReplanMonitor monitor(kReplanTolerance, kReplanPatience);
    // With m and the schedule both fixed by the spec, a new plan could change nothing.
    const bool replannable = spec_.microBatches == 0 || spec_.schedule == "auto";
    while (true) {
      table_.waitForChange(jobId_, std::chrono::milliseconds(200));
      if (isTerminal(table_.state(jobId_))) break;
      if (table_.allStagesDone(jobId_)) {
        table_.transition(jobId_, JobState::Succeeded);
        break;
      }
      if (stopping_) {
        table_.transition(jobId_, JobState::Failed, "the coordinating daemon shut down");
        break;
      }
      if (awaitingProfiles) {
        const auto profiles = table_.takeProfiles(jobId_, profileStep);
        if (!profiles) continue;
        plan(*profiles, profileStep, reason);
        if (table_.dryRun(jobId_)) {
          table_.transition(jobId_, JobState::Succeeded);
          break;
        }
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
        char why[160];
        std::snprintf(why, sizeof why, "re-plan: measured %.4f s/step vs predicted %.4f s for %d steps", measured,
                      predictedStepSeconds_, kReplanPatience);
        spdlog::info("job {}: {}; profiling again before step {}", jobId_, why, at);
        if (requestProfiles(at)) {
          profileStep = at;
          reason = why;
          awaitingProfiles = true;
        }
        break;
      }
    }
  } catch (const std::exception& e) {
    table_.transition(jobId_, JobState::Failed, e.what());
  }
  const JobState final = table_.state(jobId_);
  if (final != JobState::Succeeded || table_.dryRun(jobId_)) abortStages();
  spdlog::info("job {}: {}", jobId_, toString(final));
  finished_ = true;
}

void Coordinator::abortStages() {
  for (int i = 0; i < static_cast<int>(spec_.stages.size()); ++i) {
    try {
      clientFor(i).request({{"type", protocol::kStageAbort}, {"job", jobId_}, {"stage", i}}, std::chrono::milliseconds(2000));
    } catch (const std::exception& e) {
      spdlog::warn("job {}: could not abort stage {}: {}", jobId_, i, e.what());
    }
  }
}

}  // namespace skytrain::daemon
