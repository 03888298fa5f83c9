// Replanner: one attempt's plan as the coordinator keeps it — the first from the stages'
// profiles, and another when measured step times drift from the prediction (the stages
// profile again a few steps later, at a boundary none has reached). Polled by the
// coordinator thread, which owns it for the attempt.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/jobs/job_table.h"
#include "daemon/coordinator/stage_fleet.h"
#include "daemon/protocol/spec/job_spec.h"
#include "scheduler/planner.h"

namespace skytrain::daemon {

class Replanner {
 public:
  // `fromStep`: the attempt's resume point (-1: from scratch); a resumed attempt runs under
  // its checkpoint's plan, without profiling or re-planning (exact resume). `calibration`:
  // per stage, the seconds per micro-batch profiling misses, which outlive an attempt.
  Replanner(JobTable& table, const protocol::JobSpec& spec, std::string jobId, StageFleet& fleet,
            std::vector<double>& calibration, int64_t fromStep);

  // One turn of the coordinator's loop: plans once the awaited profiles are in, else
  // watches the new step rows. True once a dry run is planned: there is nothing to train.
  bool poll();

 private:
  // Plans from the profiles taken before `step` and sends the plan to every stage.
  void plan(const std::vector<nlohmann::json>& profiles, int64_t step, const std::string& reason);
  // Asks every stage to profile again before `step`; false if one had passed it already.
  bool requestProfiles(int64_t step);
  void watchStepTimes();

  JobTable& table_;
  const protocol::JobSpec& spec_;
  std::string jobId_;
  StageFleet& fleet_;
  std::vector<double>& calibration_;
  double predictedStepSeconds_ = 0;
  scheduler::PlannerInput profiled_;  // the plan in force's input, before calibration
  int plannedMicroBatches_ = 1;
  int64_t profileStep_;               // the profiles awaited, or the plan in force, are from before this step
  std::string reason_ = "initial plan";
  bool awaitingProfiles_;
  size_t seenSteps_;                  // step rows read so far
  bool replannable_;
  scheduler::ReplanMonitor monitor_;
};

}  // namespace skytrain::daemon
