// Human-readable lines for job progress and summaries.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace skytrain::client {

std::string formatBytes(double bytes);
// "42s", "7m", "3h", "12d": how long ago, as `docker ps` shows it.
std::string formatAge(double seconds);
// "step 12/200  loss 3.4512  1234 tok/s  sent 1.05 MB/step  0.21 s"
std::string formatStep(const nlohmann::json& step, int stepsTotal);
std::string formatSummary(const nlohmann::json& job);
// The planner's table (m, schedule, predicted step time, bubble, bytes) and its inputs.
std::string formatPlan(const nlohmann::json& plan);
// "event at step 52 (06:01:03 UTC): stage 1 (tcp://...) lost: ..."
std::string formatEvent(const nlohmann::json& event);

}  // namespace skytrain::client
