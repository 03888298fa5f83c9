#include "daemon/coordinator/replanner.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <utility>

#include "daemon/coordinator/planning.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/messages.h"
#include "scheduler/error.h"
#include "scheduler/fan_in.h"

namespace skytrain::daemon {
namespace {

// Re-plan when measured step times are more than 20% off the prediction for 5 steps in a
// row; the stages profile again kReplanLead steps later, at a boundary none has reached.
constexpr double kReplanTolerance = 0.2;
constexpr int kReplanPatience = 5;
constexpr int64_t kReplanLead = 3;

}  // namespace

Replanner::Replanner(JobTable& table, const protocol::JobSpec& spec, std::string jobId, StageFleet& fleet,
                     std::vector<double>& calibration, int64_t fromStep)
    : table_(table),
      spec_(spec),
      jobId_(std::move(jobId)),
      fleet_(fleet),
      calibration_(calibration),
      profileStep_(fromStep >= 0 ? fromStep + 1 : 0),
      awaitingProfiles_(fromStep < 0),
      seenSteps_(static_cast<size_t>(fromStep + 1)),
      monitor_(kReplanTolerance, kReplanPatience) {
  // With m and the schedule both fixed by the spec, a new plan could change nothing.
  const bool autoCodecs = spec_.compression.forward == "auto" || spec_.compression.backward == "auto";
  replannable_ = (spec_.microBatches == 0 || spec_.schedule == "auto" || autoCodecs) && fromStep < 0 &&
                 !protocol::isFanIn(spec_);
}

bool Replanner::poll() {
  if (awaitingProfiles_) {
    const auto profiles = table_.takeProfiles(jobId_, profileStep_);
    if (!profiles) return false;
    plan(*profiles, profileStep_, reason_);
    if (table_.progress(jobId_).dryRun) return true;
    awaitingProfiles_ = false;
    monitor_.reset();
    return false;
  }
  if (replannable_) watchStepTimes();
  return false;
}

void Replanner::watchStepTimes() {
  const auto rows = table_.steps(jobId_, seenSteps_);
  for (const auto& row : rows) {
    ++seenSteps_;
    const int64_t step = row["step"].get<int64_t>();
    if (step <= profileStep_) continue;  // the first step under a plan pays for new buffer sizes
    const double measured = row["step_s"].get<double>();
    if (!monitor_.observe(predictedStepSeconds_, measured)) continue;
    const int64_t at = step + kReplanLead;
    std::vector<nlohmann::json> underPlan;
    for (const auto& r : table_.steps(jobId_, 0)) {
      if (r["step"].get<int64_t>() > profileStep_) underPlan.push_back(r);
    }
    calibration_ = measuredCalibration(profiled_, plannedMicroBatches_, underPlan);
    char text[160];
    std::snprintf(text, sizeof text, "re-plan: measured %.4f s/step vs predicted %.4f s for %d steps", measured,
                  predictedStepSeconds_, kReplanPatience);
    spdlog::info("job {}: {}; profiling again before step {}", jobId_, text, at + 1);
    if (requestProfiles(at)) {
      profileStep_ = at;
      reason_ = text;
      awaitingProfiles_ = true;
    }
    return;
  }
}

void Replanner::plan(const std::vector<nlohmann::json>& profiles, int64_t step, const std::string& reason) {
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
  fleet_.request(message, StageFleet::kRequestTimeout);
}

bool Replanner::requestProfiles(int64_t step) {
  try {
    fleet_.request({{"type", protocol::kStageProfile}, {"at_step", step}}, StageFleet::kRequestTimeout);
    return true;
  } catch (const Error& e) {
    spdlog::warn("job {}: re-profile before step {} refused ({}); cancelling it", jobId_, step + 1, e.what());
    try {
      fleet_.request({{"type", protocol::kStageProfile}, {"at_step", -1}}, StageFleet::kRequestTimeout);
    } catch (const Error&) {
    }
    return false;
  }
}

}  // namespace skytrain::daemon
