#include "daemon/job_table.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "daemon/files.h"
#include "daemon/timing.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

std::string newJobId() {
  std::random_device device;
  const uint64_t id = (static_cast<uint64_t>(device()) << 32) ^ device();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(id));
  return text;
}

std::optional<JobState> parseState(const std::string& s) {
  for (auto state : kJobStates) {
    if (toString(state) == s) return state;
  }
  return std::nullopt;
}

// Adds a stage's step report (checked by the protocol's parser) to its totals.
void addTo(std::vector<StageTotals>& totals, int stage, const Json& report) {
  if (static_cast<int>(totals.size()) <= stage) totals.resize(stage + 1);
  StageTotals& t = totals[stage];
  const double backward = report.value("bytes_backward", 0.0), rawBackward = report.value("raw_backward", 0.0);
  t.bytesBackward += backward;
  t.bytesForward += report.value("bytes_sent", 0.0) - backward;
  t.rawBackward += rawBackward;
  t.rawForward += report.value("bytes_raw", 0.0) - rawBackward;
  t.computeSeconds += report.value("compute_s", 0.0);
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

bool isTerminal(JobState state) {
  return state == JobState::Succeeded || state == JobState::Failed || state == JobState::Cancelled;
}

JobTable::JobTable(std::string stateDir) : stateDir_(std::move(stateDir)) {
  makeDirectories(stateDir_ + "/jobs");
}

std::string JobTable::jobDir(const std::string& id) const { return stateDir_ + "/jobs/" + id; }

std::pair<std::string, std::vector<std::string>> JobTable::launchInfo(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Record& r = find(id);
  return {r.specText, r.stageKeys};
}

std::vector<std::string> JobTable::load() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> unfinished;
  for (const auto& entry : std::filesystem::directory_iterator(stateDir_ + "/jobs")) {
    const std::string path = entry.path().string() + "/record.json";
    try {
      std::ifstream in(path);
      if (!in) continue;
      const Json doc = Json::parse(in);
      Record r;
      r.id = doc.at("id").get<std::string>();
      r.specText = doc.at("spec").get<std::string>();
      r.spec = protocol::parseJobSpec(r.specText);
      r.state = parseState(doc.at("state").get<std::string>()).value_or(JobState::Failed);
      r.error = doc.value("error", "");
      r.createdAt = doc.value("created_at", 0.0);
      r.finishedAt = doc.value("finished_at", 0.0);
      r.evals = doc.value("evals", std::vector<Json>{});
      r.plans = doc.value("plans", std::vector<Json>{});
      r.dryRun = doc.value("dry_run", false);
      r.ownerKey = doc.value("owner_key", "");
      r.ownerName = doc.value("owner", "");
      r.stageKeys = doc.value("stage_keys", std::vector<std::string>(protocol::slotCount(r.spec)));
      r.attempt = doc.value("attempt", 0);
      r.restarts = doc.value("restarts", 0);
      r.checkpoints = doc.value("checkpoints", std::vector<int64_t>{});
      r.events = doc.value("events", std::vector<Json>{});
      if (static_cast<int>(r.stageKeys.size()) != protocol::slotCount(r.spec)) {
        throw Error("stage_keys does not match the spec's stages and replicas");
      }
      std::ifstream metrics(entry.path().string() + "/metrics.jsonl");
      for (std::string line; std::getline(metrics, line);) {
        if (!line.empty()) r.steps.push_back(Json::parse(line));
      }
      if (!isTerminal(r.state) && r.dryRun) {
        r.state = JobState::Failed;
        r.error = "the coordinating daemon stopped during the dry run";
        r.finishedAt = wallSeconds();
        persist(r);
      }
      if (!isTerminal(r.state)) unfinished.push_back(r.id);
      records_[r.id] = std::move(r);
    } catch (const std::exception& e) {
      spdlog::warn("jobs: skipped unreadable record {}: {}", path, e.what());
    }
  }
  spdlog::info("jobs: loaded {} job records from {} ({} unfinished)", records_.size(), stateDir_, unfinished.size());
  return unfinished;
}

std::string JobTable::create(const protocol::JobSpec& spec, const std::string& specText,
                             std::pair<std::string, std::string> owner, std::vector<std::string> stageKeys,
                             bool dryRun) {
  SKYTRAIN_CHECK(static_cast<int>(stageKeys.size()) == protocol::slotCount(spec), "one key per stage and replica");
  std::lock_guard<std::mutex> lock(mutex_);
  Record r;
  r.dryRun = dryRun;
  r.ownerKey = std::move(owner.first);
  r.ownerName = std::move(owner.second);
  r.stageKeys = std::move(stageKeys);
  do {
    r.id = newJobId();
  } while (records_.count(r.id));
  r.spec = spec;
  r.specText = specText;
  r.createdAt = wallSeconds();
  makeDirectories(jobDir(r.id));
  persist(r);
  const std::string id = r.id;
  records_[id] = std::move(r);
  return id;
}

JobTable::Record& JobTable::find(const std::string& id) {
  auto it = records_.find(id);
  if (it == records_.end()) throw Error("unknown job \"" + id + "\"");
  return it->second;
}

const JobTable::Record& JobTable::find(const std::string& id) const {
  return const_cast<JobTable*>(this)->find(id);
}

JobState JobTable::state(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return find(id).state;
}

std::pair<std::string, std::string> JobTable::owner(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Record& r = find(id);
  return {r.ownerKey, r.ownerName};
}

std::string JobTable::stageKey(const std::string& id, int stage, int replica) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Record& r = find(id);
  if (stage < 0 || stage >= static_cast<int>(r.spec.stages.size()) || replica < 0 ||
      replica >= protocol::replicaCount(r.spec)) {
    throw WireError("job " + id + " has no stage " + std::to_string(stage) + " replica " + std::to_string(replica));
  }
  return r.stageKeys.at(static_cast<size_t>(protocol::slotOf(r.spec, stage, replica)));
}

Json JobTable::header(const Record& r) const {
  return {{"id", r.id},
          {"name", r.spec.name},
          {"owner", r.ownerName},
          {"state", toString(r.state)},
          {"error", r.error},
          {"steps_total", r.spec.steps},
          {"steps_done", r.steps.size()},
          {"stages", r.spec.stages.size()},
          {"micro_batches", r.plans.empty() ? Json(r.spec.microBatches) : r.plans.back()["micro_batches"]},
          {"schedule", r.plans.empty() ? Json(r.spec.schedule) : r.plans.back()["schedule"]},
          {"dry_run", r.dryRun},
          {"attempt", r.attempt},
          {"restarts", r.restarts},
          {"checkpoints", r.checkpoints},
          {"created_at", r.createdAt},
          {"finished_at", r.finishedAt}};
}

Json JobTable::status(const std::string& id, size_t sinceStep) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Record& r = find(id);
  Json job = header(r);
  job["steps"] = Json::array();
  for (size_t i = sinceStep; i < r.steps.size(); ++i) job["steps"].push_back(r.steps[i]);
  job["evals"] = r.evals;
  job["summary"] = summary(r);
  job["plans"] = r.plans;
  job["events"] = r.events;
  // Where each stage's weights are, for `skytrain export` (the keys are those this daemon
  // trusts for them).
  job["stage_daemons"] = Json::array();
  for (size_t i = 0; i < r.spec.stages.size(); ++i) {
    job["stage_daemons"].push_back({{"endpoint", r.spec.stages[i].daemon},
                                    {"key", i < r.stageKeys.size() ? r.stageKeys[i] : std::string()}});
  }
  return job;
}

Json JobTable::list(const std::optional<std::string>& owner) const {
  std::lock_guard<std::mutex> lock(mutex_);
  Json jobs = Json::array();
  for (const auto& entry : records_) {
    if (!owner || entry.second.ownerKey == *owner) jobs.push_back(header(entry.second));
  }
  return jobs;
}

bool JobTable::transition(const std::string& id, JobState state, const std::string& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  Record& r = find(id);
  if (isTerminal(r.state)) return false;
  r.state = state;
  if (!error.empty()) r.error = error;
  if (isTerminal(state)) r.finishedAt = wallSeconds();
  persist(r);
  changed(r);
  return true;
}

void JobTable::applyReport(const protocol::StageReport& report) {
  using protocol::ReportKind;
  std::lock_guard<std::mutex> lock(mutex_);
  Record& r = find(report.job);
  if (report.attempt != r.attempt) return;  // a late report of an aborted attempt
  if (report.stage >= static_cast<int>(r.spec.stages.size()) || report.replica >= protocol::replicaCount(r.spec)) {
    throw WireError("report for job " + r.id + " names stage " + std::to_string(report.stage) + " replica " +
                    std::to_string(report.replica) + ", which does not exist");
  }
  const int stage = protocol::slotOf(r.spec, report.stage, report.replica);  // a slot: stage i replica 0 is i
  switch (report.kind) {
    case ReportKind::Step:
      if (report.step < static_cast<int64_t>(r.steps.size()) || report.step >= r.spec.steps) {
        throw WireError("report for job " + r.id + " step " + std::to_string(report.step) + " is out of order");
      }
      r.pending[report.step][stage] = protocol::toJson(report);
      completeSteps(r);
      break;
    case ReportKind::Eval:
      if (report.replica > 0) break;  // replica 0's pipeline validates for all
      r.evals.push_back({{"step", report.step}, {"loss", *report.loss}, {"time", wallSeconds()}});
      if (report.accuracy) r.evals.back()["accuracy"] = *report.accuracy;
      if (report.bleu) r.evals.back()["bleu"] = *report.bleu;
      persist(r);
      break;
    case ReportKind::Profile: r.profiles[report.step][stage] = report.profile; break;
    case ReportKind::Done: r.stagesDone.insert(stage); break;
    case ReportKind::Failed:
      // A stage that names the culprit beats one that only saw its effect.
      if (!r.stageFailure || r.stageFailure->find("in another stage") != std::string::npos) {
        r.stageFailure = protocol::describeSlot(r.spec, stage) + " (" + protocol::placementOf(r.spec, stage).daemon + "): " +
                         (report.error.empty() ? "failed" : report.error);
      }
      break;
    case ReportKind::Checkpoint: {
      auto& confirmed = r.confirmations[report.step];
      confirmed.insert(stage);
      if (static_cast<int>(confirmed.size()) == protocol::slotCount(r.spec)) {
        r.confirmations.erase(report.step);
        if (r.checkpoints.empty() || r.checkpoints.back() < report.step) r.checkpoints.push_back(report.step);
        r.checkpointAt = wallSeconds();
        while (static_cast<int>(r.checkpoints.size()) > r.spec.checkpoint.keep) r.checkpoints.erase(r.checkpoints.begin());
        persist(r);
      }
      break;
    }
  }
  changed(r);
}

void JobTable::changed(Record& r) {
  ++r.version;
  changed_.notify_all();
}

// A step row is complete once every stage has reported it; rows complete in step order.
void JobTable::completeSteps(Record& r) {
  const size_t stages = r.spec.stages.size();
  const size_t slots = static_cast<size_t>(protocol::slotCount(r.spec));
  while (!r.pending.empty() && r.pending.begin()->second.size() == slots &&
         r.pending.begin()->first == static_cast<int64_t>(r.steps.size())) {
    const auto& reports = r.pending.begin()->second;
    double stepSeconds = 0, bytes = 0, raw = 0, checkpoint = 0;
    bool skipped = false;
    int lead = -1;
    Json compute = Json::array(), losses = Json::array();
    // The training loss: the mean of the last stage's copies, each over its share of the batch.
    Json loss = 0.0;
    for (int replica = 0; replica < protocol::replicaCount(r.spec); ++replica) {
      const Json& part = reports.at(protocol::slotOf(r.spec, static_cast<int>(stages) - 1, replica)).at("loss");
      loss = part.is_number() && loss.is_number() ? Json(loss.get<double>() + part.get<double>() / protocol::replicaCount(r.spec))
                                                  : Json();
    }
    for (const auto& entry : reports) {
      stepSeconds = std::max(stepSeconds, entry.second.at("step_s").get<double>());
      checkpoint = std::max(checkpoint, entry.second.value("checkpoint_s", 0.0));
      skipped = skipped || entry.second.value("skipped", false);
      bytes += entry.second.at("bytes_sent").get<double>();
      raw += entry.second.value("bytes_raw", 0.0);
      compute.push_back(entry.second.at("compute_s"));
      losses.push_back(entry.second.value("loss", Json()));
      lead = std::max(lead, entry.second.value("lead", -1));
      addTo(r.totals, protocol::stageOfSlot(r.spec, entry.first), entry.second);
    }
    // A fan-in's step trains every producer's batch.
    const double batches = protocol::isFanIn(r.spec) ? static_cast<double>(stages - 1) : 1.0;
    const double tokens = batches * r.spec.batchSize * r.spec.model.seqLen;
    Json row = {{"step", r.pending.begin()->first},
                {"loss", loss},
                {"step_s", stepSeconds},
                {"tokens_per_s", stepSeconds > 0 ? tokens / stepSeconds : 0.0},
                {"bytes_sent", bytes},
                {"bytes_raw", raw},
                {"micro_batches", reports.begin()->second.value("micro_batches", 0)},
                {"checkpoint_s", checkpoint},
                {"lr", reports.begin()->second.value("lr", 0.0)},
                {"skipped", skipped},
                {"compute_s", compute},
                {"time", wallSeconds()}};  // when the step completed (plots against wall-clock)
    if (protocol::isFanIn(r.spec)) {
      row["stage_losses"] = losses;  // each generator's masked-token loss, then the discriminator's
      row["lead"] = lead;            // how far the furthest producer ran ahead of the consumer
    }
    appendLine(jobDir(r.id) + "/metrics.jsonl", row.dump(-1, ' ', false, Json::error_handler_t::replace));
    r.steps.push_back(std::move(row));
    r.pending.erase(r.pending.begin());
  }
}

void JobTable::waitForChange(const std::string& id, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  Record& r = find(id);
  const uint64_t seen = r.version;
  changed_.wait_for(lock, timeout, [&] { return r.version != seen; });
}

bool JobTable::allStagesDone(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Record& r = find(id);
  return static_cast<int>(r.stagesDone.size()) == protocol::slotCount(r.spec);
}

std::set<int> JobTable::doneStages(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return find(id).stagesDone;
}

bool JobTable::dryRun(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return find(id).dryRun;
}

std::optional<std::vector<Json>> JobTable::takeProfiles(const std::string& id, int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  Record& r = find(id);
  auto it = r.profiles.find(step);
  if (it == r.profiles.end() || static_cast<int>(it->second.size()) != protocol::slotCount(r.spec)) return std::nullopt;
  std::vector<Json> out;  // replica 0's, one per stage: the copies run the same shapes
  for (auto& entry : it->second) {
    if (entry.first < static_cast<int>(r.spec.stages.size())) out.push_back(std::move(entry.second));
  }
  r.profiles.erase(it);
  return out;
}

void JobTable::setPlan(const std::string& id, Json plan, int64_t fromStep, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  Record& r = find(id);
  plan["from_step"] = fromStep;
  plan["reason"] = reason;
  r.plans.push_back(std::move(plan));
  persist(r);
  changed(r);
}

std::vector<Json> JobTable::steps(const std::string& id, size_t from) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Record& r = find(id);
  if (from >= r.steps.size()) return {};
  return {r.steps.begin() + static_cast<std::ptrdiff_t>(from), r.steps.end()};
}

void JobTable::persist(const Record& r) const {
  Json doc = header(r);
  doc["spec"] = r.specText;
  doc["owner_key"] = r.ownerKey;
  doc["events"] = r.events;
  doc["stage_keys"] = r.stageKeys;
  doc["evals"] = r.evals;
  doc["plans"] = r.plans;
  doc["summary"] = summary(r);
  writeFileAtomic(jobDir(r.id) + "/record.json", doc.dump(2, ' ', false, Json::error_handler_t::replace));
}

}  // namespace skytrain::daemon
