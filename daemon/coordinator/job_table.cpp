#include "daemon/coordinator/job_table.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "daemon/ops/files.h"
#include "daemon/ops/timing.h"
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

void JobTable::changed(Record& r) {
  ++r.version;
  changed_.notify_all();
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
