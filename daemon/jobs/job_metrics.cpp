#include "daemon/jobs/job_metrics.h"

#include <cmath>

namespace skytrain::daemon {
namespace {

std::optional<double> number(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  const double value = it->get<double>();
  return std::isfinite(value) ? std::optional<double>(value) : std::nullopt;
}

}  // namespace

JobMetrics jobMetrics(const JobRecord& r, double now) {
  JobMetrics m;
  m.id = r.id;
  m.name = r.spec.name;
  m.state = r.state;
  m.restarts = r.restarts;
  m.finishedAt = isTerminal(r.state) ? r.finishedAt : 0;
  for (const auto& e : r.events) m.failures += e.value("failure", false) ? 1 : 0;
  m.stages = r.totals;
  m.stages.resize(r.spec.stages.size());
  if (!r.steps.empty()) {
    const Json& last = r.steps.back();
    m.step = last.value("step", int64_t{0}) + 1;  // its number, as every interface shows it
    m.trainLoss = number(last, "loss");
    m.tokensPerSecond = number(last, "tokens_per_s");
    m.stepSeconds = number(last, "step_s");
    if (m.stepSeconds && *m.stepSeconds > 0) m.bubble = stepBubble(last);
    for (auto [name, into] : {std::pair{"code_share", &m.codeShares}, std::pair{"sender_loss", &m.senderLosses}}) {
      const auto it = last.find(name);
      if (it == last.end() || !it->is_object()) continue;
      for (const auto& [layer, value] : it->items()) {
        if (value.is_number()) (*into)[layer] = value.get<double>();
      }
    }
  }
  if (!r.evals.empty()) m.validationLoss = number(r.evals.back(), "loss");
  if (!r.plans.empty()) {
    const Json& plan = r.plans.back();
    m.predictedStepSeconds = number(plan, "step_s");
    m.predictedBubble = number(plan, "bubble");
    for (const auto& link : plan.value("links", Json::array())) {
      const auto bandwidth = number(link, "bandwidth_bytes_per_s"), delay = number(link, "delay_s");
      if (bandwidth && delay) m.links.emplace_back(*bandwidth, 2 * *delay);
    }
  }
  if (!r.checkpoints.empty() && r.checkpointAt > 0) m.checkpointAgeSeconds = now - r.checkpointAt;
  return m;
}

}  // namespace skytrain::daemon
