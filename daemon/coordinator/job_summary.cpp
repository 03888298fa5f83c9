// JobTable (job_table.h): a job's summary — final loss, throughput, bytes, and predicted
// against measured step time and bubble under the plan in force.
#include <algorithm>

#include "daemon/coordinator/job_table.h"

namespace skytrain::daemon {

double stepBubble(const Json& row) {
  const double seconds = row.value("step_s", 0.0);
  const Json& perStage = row.value("compute_s", Json::array());
  if (!(seconds > 0) || !perStage.is_array() || perStage.empty()) return 0;
  double compute = 0;
  for (const auto& c : perStage) compute += c.is_number() ? c.get<double>() : 0.0;
  return 1.0 - compute / (static_cast<double>(perStage.size()) * seconds);
}

Json JobTable::summary(const Record& r) const {
  Json s = Json::object();
  if (r.steps.empty()) return s;
  double seconds = 0, bytes = 0, raw = 0;
  for (const auto& step : r.steps) {
    seconds += step["step_s"].get<double>();
    bytes += step["bytes_sent"].get<double>();
    raw += step.value("bytes_raw", 0.0);
  }
  const double tokensPerStep = static_cast<double>(r.spec.batchSize) * r.spec.model.seqLen;
  // Single-step losses are noisy; the summary's final loss is the mean of the last ten.
  const size_t tail = std::min<size_t>(10, r.steps.size());
  double lastLosses = 0;
  for (size_t i = r.steps.size() - tail; i < r.steps.size(); ++i) lastLosses += r.steps[i]["loss"].get<double>();
  s["final_loss"] = lastLosses / tail;
  s["final_loss_steps"] = tail;
  s["first_loss"] = r.steps.front()["loss"];
  s["tokens_per_s"] = tokensPerStep * r.steps.size() / seconds;
  s["bytes_sent_total"] = bytes;
  s["bytes_sent_per_step"] = bytes / r.steps.size();
  s["bytes_raw_per_step"] = raw / r.steps.size();
  s["train_seconds"] = seconds;
  if (!r.evals.empty()) s["validation_loss"] = r.evals.back()["loss"];
  if (!r.evals.empty() && r.evals.back().contains("accuracy")) s["validation_accuracy"] = r.evals.back()["accuracy"];
  if (!r.evals.empty() && r.evals.back().contains("bleu")) s["validation_bleu"] = r.evals.back()["bleu"];
  // Predicted vs measured under the plan in force: the first step after a plan is skipped
  // (it pays for allocating new buffer sizes).
  if (!r.plans.empty()) {
    const Json& plan = r.plans.back();
    const int64_t from = plan["from_step"].get<int64_t>() + 1;
    double measured = 0, idle = 0;
    int counted = 0;
    for (const auto& step : r.steps) {
      if (step["step"].get<int64_t>() < from) continue;
      measured += step["step_s"].get<double>();
      idle += stepBubble(step);
      ++counted;
    }
    s["predicted_step_s"] = plan["step_s"];
    s["predicted_bubble"] = plan["bubble"];
    if (counted > 0) {
      s["measured_step_s"] = measured / counted;
      s["measured_bubble"] = idle / counted;
      s["measured_steps"] = counted;
    }
  }
  return s;
}

}  // namespace skytrain::daemon
