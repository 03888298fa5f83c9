// The coordinator's planning glue: stage profiles (JSON reports) in, a scheduler::Plan out,
// and the plan as JSON for the job record, `skytrain plan` and `status`.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "daemon/protocol/spec/job_spec.h"
#include "scheduler/planner.h"

namespace skytrain::daemon {

// Fits t(b) = a + k b to each stage's measurements; the links are those each stage measured
// to its next. Candidate schedules: the spec's, or all of them for "auto"; m: the spec's,
// or every divisor for "auto". Throws skytrain::WireError on a malformed profile.
scheduler::PlannerInput plannerInput(const protocol::JobSpec& spec, const std::vector<nlohmann::json>& profiles);

// What profiling misses, per stage and micro-batch: each stage's mean compute per step in
// `rows` (step reports) over m, minus t_f(b) + t_b(b) of `input`'s fits. Profiles run a
// stage's ops alone with hot caches; in a running pipeline each micro-batch also pays for
// frames, hand-offs between threads and cold buffers (here ~3 ms at b = 1, nothing
// measurable at b = 16), a cost per micro-batch that only measurement shows.
std::vector<double> measuredCalibration(const scheduler::PlannerInput& input, int microBatches,
                                        const std::vector<nlohmann::json>& rows);
// Adds each stage's per-micro-batch seconds to its fits' intercepts (split between forward
// and backward in proportion), never below zero.
void calibrate(scheduler::PlannerInput& input, const std::vector<double>& secondsPerMicroBatch);

nlohmann::json toJson(const scheduler::PlanRow& row);
nlohmann::json toJson(const scheduler::Plan& plan, const scheduler::PlannerInput& input);
// Adds to each of a plan's stages what its profile says of its parameters: trainable and
// frozen counts, and what init_from loaded. Left out where a profile lacks them or has
// them malformed.
void describeStages(nlohmann::json& plan, const std::vector<nlohmann::json>& profiles);

}  // namespace skytrain::daemon
