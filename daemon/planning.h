// The coordinator's planning glue: stage profiles (JSON reports) in, a scheduler::Plan out,
// and the plan as JSON for the job record, `skytrain plan` and `status`.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "daemon/protocol/job_spec.h"
#include "scheduler/planner.h"

namespace skytrain::daemon {

// Fits t(b) = a + k b to each stage's measurements; the links are those each stage measured
// to its next. Candidate schedules: the spec's, or all of them for "auto"; m: the spec's,
// or every divisor for "auto". Throws skytrain::WireError on a malformed profile.
scheduler::PlannerInput plannerInput(const protocol::JobSpec& spec, const std::vector<nlohmann::json>& profiles);

nlohmann::json toJson(const scheduler::PlanRow& row);
nlohmann::json toJson(const scheduler::Plan& plan, const scheduler::PlannerInput& input);

}  // namespace skytrain::daemon
