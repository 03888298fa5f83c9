#include "daemon/jobs/job_record.h"

#include <algorithm>

#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

// A copy of rows with row[key], a step's index, made its number (1-based).
Json numbered(const std::vector<Json>& rows, const char* key, size_t from = 0) {
  Json out = Json::array();
  for (size_t i = from; i < rows.size(); ++i) {
    Json row = rows[i];
    if (row.contains(key) && row[key].is_number_integer()) row[key] = row[key].get<int64_t>() + 1;
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace

std::string toString(JobState state) {
  switch (state) {
    case JobState::Preparing: return "preparing";
    case JobState::Running: return "running";
    case JobState::Succeeded: return "succeeded";
    case JobState::Failed: return "failed";
    case JobState::Cancelled: return "cancelled";
  }
  return "unknown";
}

std::optional<JobState> parseJobState(const std::string& text) {
  for (auto state : kJobStates) {
    if (toString(state) == text) return state;
  }
  return std::nullopt;
}

bool isTerminal(JobState state) {
  return state == JobState::Succeeded || state == JobState::Failed || state == JobState::Cancelled;
}

int activeSlots(const JobRecord& r) {
  return r.reports.pipelines.empty() ? protocol::slotCount(r.spec)
                                     : static_cast<int>(r.spec.stages.size() * r.reports.pipelines.size());
}

bool isActiveSlot(const JobRecord& r, int slot) {
  const auto& p = r.reports.pipelines;
  return p.empty() || std::find(p.begin(), p.end(), protocol::replicaOfSlot(r.spec, slot)) != p.end();
}

double stepBubble(const Json& row) {
  const double seconds = row.value("step_s", 0.0);
  const Json& perStage = row.value("compute_s", Json::array());
  if (!(seconds > 0) || !perStage.is_array() || perStage.empty()) return 0;
  double compute = 0;
  for (const auto& c : perStage) compute += c.is_number() ? c.get<double>() : 0.0;
  return 1.0 - compute / (static_cast<double>(perStage.size()) * seconds);
}

JobRecord JobRecord::fromDocument(const Json& doc) {
  JobRecord r;
  r.id = doc.at("id").get<std::string>();
  r.specText = doc.at("spec").get<std::string>();
  r.spec = protocol::parseJobSpec(r.specText);
  r.state = parseJobState(doc.at("state").get<std::string>()).value_or(JobState::Failed);
  r.error = doc.value("error", "");
  r.createdAt = doc.value("created_at", 0.0);
  r.finishedAt = doc.value("finished_at", 0.0);
  r.evals = doc.value("evals", std::vector<Json>{});
  r.plans = doc.value("plans", std::vector<Json>{});
  r.dryRun = doc.value("dry_run", false);
  r.ownerKey = doc.value("owner_key", "");
  r.proof = doc.value("proof", "");
  r.ownerName = doc.value("owner", "");
  r.stageKeys = doc.value("stage_keys", std::vector<std::string>(protocol::slotCount(r.spec)));
  r.attempt = doc.value("attempt", 0);
  r.restarts = doc.value("restarts", 0);
  r.weightsPipeline = doc.value("weights_pipeline", 0);
  if (r.weightsPipeline < 0 || r.weightsPipeline >= protocol::replicaCount(r.spec)) r.weightsPipeline = 0;
  r.checkpoints = doc.value("checkpoints", std::vector<int64_t>{});
  r.events = doc.value("events", std::vector<Json>{});
  if (static_cast<int>(r.stageKeys.size()) != protocol::slotCount(r.spec)) {
    throw Error("stage_keys does not match the spec's stages and replicas");
  }
  return r;
}

Json JobRecord::document() const {
  Json doc = header();
  doc["spec"] = specText;
  doc["owner_key"] = ownerKey;
  doc["proof"] = proof;
  doc["events"] = events;
  doc["stage_keys"] = stageKeys;
  if (weightsPipeline > 0) doc["weights_pipeline"] = weightsPipeline;
  doc["evals"] = evals;
  doc["plans"] = plans;
  doc["summary"] = summary();
  return doc;
}

Json JobRecord::header() const {
  return {{"id", id},
          {"name", spec.name},
          {"owner", ownerName},
          {"state", toString(state)},
          {"error", error},
          {"steps_total", spec.steps},
          {"steps_done", steps.size()},
          {"stages", spec.stages.size()},
          {"micro_batches", plans.empty() ? Json(spec.microBatches) : plans.back()["micro_batches"]},
          {"schedule", plans.empty() ? Json(spec.schedule) : plans.back()["schedule"]},
          {"dry_run", dryRun},
          {"attempt", attempt},
          {"restarts", restarts},
          {"checkpoints", checkpoints},
          {"created_at", createdAt},
          {"finished_at", finishedAt}};
}

Json JobRecord::listing() const {
  Json job = header();
  job["checkpoints"] = Json::array();
  for (int64_t step : checkpoints) job["checkpoints"].push_back(step + 1);
  return job;
}

Json JobRecord::status(size_t sinceStep) const {
  Json job = listing();
  job["steps"] = numbered(steps, "step", sinceStep);
  job["evals"] = numbered(evals, "step");
  job["summary"] = summary();
  job["plans"] = numbered(plans, "from_step");
  job["events"] = events;
  job["spec"] = specText;  // the owner's own spec: `export --format hf` writes config.json from it
  // Where each stage's weights are, for `skytrain export` (the keys are those this daemon
  // trusts for them): pipeline 0's copies, or the pipeline that ended a healed job.
  job["stage_daemons"] = Json::array();
  for (size_t i = 0; i < spec.stages.size(); ++i) {
    const int slot = protocol::slotOf(spec, static_cast<int>(i), weightsPipeline);
    Json where = {{"endpoint", protocol::placementOf(spec, slot).daemon},
                  {"key", slot < static_cast<int>(stageKeys.size()) ? stageKeys[slot] : std::string()}};
    if (weightsPipeline > 0) where["replica"] = weightsPipeline;
    job["stage_daemons"].push_back(std::move(where));
  }
  return job;
}

Json JobRecord::summary() const {
  Json s = Json::object();
  if (steps.empty()) return s;
  double seconds = 0, bytes = 0, raw = 0;
  // value(), not get(): a row read back from metrics.jsonl is whatever survived on disk.
  for (const auto& step : steps) {
    seconds += step.value("step_s", 0.0);
    bytes += step.value("bytes_sent", 0.0);
    raw += step.value("bytes_raw", 0.0);
  }
  const double tokensPerStep = static_cast<double>(spec.batchSize) * spec.model.seqLen;
  // Single-step losses are noisy; the summary's final loss is the mean of the last ten.
  const size_t tail = std::min<size_t>(10, steps.size());
  double lastLosses = 0;
  for (size_t i = steps.size() - tail; i < steps.size(); ++i) lastLosses += steps[i].value("loss", 0.0);
  s["final_loss"] = lastLosses / tail;
  s["final_loss_steps"] = tail;
  s["first_loss"] = steps.front().value("loss", 0.0);
  s["tokens_per_s"] = seconds > 0 ? tokensPerStep * steps.size() / seconds : 0.0;
  s["bytes_sent_total"] = bytes;
  s["bytes_sent_per_step"] = bytes / steps.size();
  s["bytes_raw_per_step"] = raw / steps.size();
  s["train_seconds"] = seconds;
  if (!evals.empty()) s["validation_loss"] = evals.back()["loss"];
  if (!evals.empty() && evals.back().contains("accuracy")) s["validation_accuracy"] = evals.back()["accuracy"];
  if (!evals.empty() && evals.back().contains("bleu")) s["validation_bleu"] = evals.back()["bleu"];
  // Predicted vs measured under the plan in force: the first step after a plan is skipped
  // (it pays for allocating new buffer sizes).
  if (!plans.empty()) {
    const Json& plan = plans.back();
    const int64_t from = plan["from_step"].get<int64_t>() + 1;
    double measured = 0, idle = 0;
    int counted = 0;
    for (const auto& step : steps) {
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
