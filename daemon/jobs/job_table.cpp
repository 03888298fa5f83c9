#include "daemon/jobs/job_table.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "daemon/ops/timing.h"
#include "daemon/protocol/job_identity.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

constexpr double kDryRunKeptS = 600;  // how long a finished dry run's plan stays readable

}  // namespace

JobTable::JobTable(std::string stateDir, std::string selfKey) : files_(std::move(stateDir)), selfKey_(std::move(selfKey)) {}

std::vector<std::string> JobTable::load() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> unfinished;
  for (const auto& dir : files_.entries()) {
    const std::string& path = dir;
    try {
      std::string recovered;
      std::optional<JobRecord> read = files_.read(dir, &recovered);
      if (!read) continue;
      JobRecord& r = *read;
      if (!recovered.empty()) {
        spdlog::warn("jobs: {}: its record.json was not usable: {}", r.id, recovered);
        r.events.push_back({{"time", wallSeconds()}, {"step", r.steps.size()}, {"message", "record " + recovered}});
        files_.save(r);
      }
      if (!isTerminal(r.state) && r.dryRun) {
        r.state = JobState::Failed;
        r.error = "the coordinating daemon stopped during the dry run";
        r.finishedAt = wallSeconds();
        files_.save(r);
      }
      if (!isTerminal(r.state)) unfinished.push_back(r.id);
      records_[r.id] = std::move(r);
    } catch (const std::exception& e) {
      spdlog::error("jobs: cannot read any record of {} (record.json, record.prev.json, job.json): {}", path,
                    e.what());
    }
  }
  spdlog::info("jobs: loaded {} job records from {} ({} unfinished)", records_.size(), files_.stateDir(),
               unfinished.size());
  return unfinished;
}

std::string JobTable::create(const protocol::JobSpec& spec, const std::string& specText,
                             std::pair<std::string, std::string> owner, std::vector<std::string> stageKeys,
                             bool dryRun) {
  SKYTRAIN_CHECK(static_cast<int>(stageKeys.size()) == protocol::slotCount(spec), "one key per stage and replica");
  std::lock_guard<std::mutex> lock(mutex_);
  // Dry runs are kept only until their plan has surely been read.
  for (auto it = records_.begin(); it != records_.end();) {
    const JobRecord& old = it->second;
    const bool stale = old.dryRun && isTerminal(old.state) && wallSeconds() - old.finishedAt > kDryRunKeptS;
    it = stale ? records_.erase(it) : std::next(it);
  }
  JobRecord r;
  r.dryRun = dryRun;
  r.ownerKey = std::move(owner.first);
  r.ownerName = std::move(owner.second);
  r.stageKeys = std::move(stageKeys);
  protocol::JobIdentity identity;
  do {
    identity = protocol::newJobIdentity(selfKey_);
  } while (records_.count(identity.id));
  r.id = identity.id;
  r.proof = identity.proof;
  r.spec = spec;
  r.specText = specText;
  r.createdAt = wallSeconds();
  files_.create(r);
  const std::string id = r.id;
  records_[id] = std::move(r);
  return id;
}

JobRecord& JobTable::find(const std::string& id) {
  auto it = records_.find(id);
  if (it == records_.end()) throw Error("unknown job \"" + id + "\"");
  return it->second;
}

const JobRecord& JobTable::find(const std::string& id) const { return const_cast<JobTable*>(this)->find(id); }

void JobTable::changed(JobRecord& r) {
  ++r.version;
  changed_.notify_all();
}

std::pair<std::string, std::vector<std::string>> JobTable::launchInfo(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const JobRecord& r = find(id);
  return {r.specText, r.stageKeys};
}

Json JobTable::status(const std::string& id, size_t sinceStep) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return find(id).status(sinceStep);
}

Json JobTable::list(const std::optional<std::string>& owner) const {
  std::lock_guard<std::mutex> lock(mutex_);
  Json jobs = Json::array();
  for (const auto& entry : records_) {
    if (entry.second.dryRun) continue;  // `skytrain plan` is not a job
    if (!owner || entry.second.ownerKey == *owner) jobs.push_back(entry.second.listing());
  }
  return jobs;
}

JobState JobTable::state(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return find(id).state;
}

JobProgress JobTable::progress(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const JobRecord& r = find(id);
  JobProgress p;
  p.attempt = r.attempt;
  p.restarts = r.restarts;
  p.dryRun = r.dryRun;
  p.lastCheckpoint = r.checkpoints.empty() ? -1 : r.checkpoints.back();
  p.stepsDone = static_cast<int64_t>(r.steps.size());
  p.microBatches = r.plans.empty() ? r.spec.microBatches : r.plans.back().value("micro_batches", r.spec.microBatches);
  p.stageFailure = r.reports.stageFailure;
  p.stagesDone = r.reports.stagesDone;
  p.allStagesDone = static_cast<int>(r.reports.stagesDone.size()) == activeSlots(r);
  return p;
}

std::pair<std::string, std::string> JobTable::owner(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const JobRecord& r = find(id);
  return {r.ownerKey, r.ownerName};
}

std::string JobTable::proof(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return find(id).proof;
}

std::string JobTable::stageKey(const std::string& id, int stage, int replica) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const JobRecord& r = find(id);
  if (stage < 0 || stage >= static_cast<int>(r.spec.stages.size()) || replica < 0 ||
      replica >= protocol::replicaCount(r.spec)) {
    throw WireError("job " + id + " has no stage " + std::to_string(stage) + " replica " + std::to_string(replica));
  }
  return r.stageKeys.at(static_cast<size_t>(protocol::slotOf(r.spec, stage, replica)));
}

bool JobTable::transition(const std::string& id, JobState state, const std::string& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  if (isTerminal(r.state)) return false;
  r.state = state;
  if (!error.empty()) r.error = error;
  if (isTerminal(state)) r.finishedAt = wallSeconds();
  files_.save(r);
  changed(r);
  return true;
}

bool JobTable::reopen(const std::string& id, const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  if (r.state != JobState::Failed && r.state != JobState::Cancelled) return false;
  r.state = JobState::Preparing;
  r.error.clear();
  r.finishedAt = 0;
  r.restarts = 0;
  r.events.push_back({{"time", wallSeconds()}, {"step", r.steps.size()}, {"message", why}});
  files_.save(r);
  changed(r);
  return true;
}

void JobTable::beginAttempt(const std::string& id, int attempt, int64_t fromStep, std::vector<int> pipelines) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  r.attempt = attempt;
  r.reports = AttemptReports{};
  r.reports.pipelines = std::move(pipelines);
  r.rendezvous.clear();  // copies of the new attempt meet afresh
  const size_t keep = static_cast<size_t>(fromStep + 1);
  if (r.steps.size() > keep) {
    r.steps.resize(keep);
    files_.rewriteSteps(r);
  }
  r.evals.erase(std::remove_if(r.evals.begin(), r.evals.end(),
                               [&](const Json& e) { return e["step"].get<int64_t>() > fromStep; }),
                r.evals.end());
  if (!isTerminal(r.state)) r.state = JobState::Running;
  files_.markAttempt(r);
  files_.save(r);
  changed(r);
}

void JobTable::countRestart(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  ++r.restarts;
  files_.save(r);
}

void JobTable::dropCheckpoint(const std::string& id, int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  r.checkpoints.erase(std::remove(r.checkpoints.begin(), r.checkpoints.end(), step), r.checkpoints.end());
  files_.save(r);
}

void JobTable::addEvent(const std::string& id, const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  r.events.push_back({{"time", wallSeconds()}, {"step", r.steps.size()}, {"message", message}});
  spdlog::info("job {}: {}", id, message);
  files_.save(r);
  changed(r);
}

void JobTable::addFailure(const std::string& id, int attempt, const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  const std::string message = "attempt " + std::to_string(attempt) + " failed: " + why;
  r.events.push_back({{"time", wallSeconds()}, {"step", r.steps.size()}, {"message", message}, {"failure", true},
                      {"attempt", attempt}});
  spdlog::warn("job {}: {}", id, message);
  files_.save(r);
  changed(r);
}

void JobTable::applyReport(const protocol::StageReport& report) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(report.job);
  if (reports_.apply(r, report)) changed(r);
}

void JobTable::waitForChange(const std::string& id, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  const uint64_t seen = r.version;
  changed_.wait_for(lock, timeout, [&] { return r.version != seen; });
}

bool JobTable::takeReady(const std::string& id, int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  auto it = r.reports.ready.find(step);
  if (it == r.reports.ready.end() || static_cast<int>(it->second.size()) != activeSlots(r)) return false;
  r.reports.ready.erase(r.reports.ready.begin(), std::next(it));
  return true;
}

void JobTable::setWeightsPipeline(const std::string& id, int pipeline) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  if (r.weightsPipeline == pipeline) return;
  r.weightsPipeline = pipeline;
  files_.save(r);
}

void JobTable::narrowPipelines(const std::string& id, std::vector<int> pipelines) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  reports_.narrow(r, std::move(pipelines));
  changed(r);
}

std::optional<std::vector<Json>> JobTable::takeProfiles(const std::string& id, int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  auto& profiles = r.reports.profiles;
  auto it = profiles.find(step);
  if (it == profiles.end() || static_cast<int>(it->second.size()) != activeSlots(r)) return std::nullopt;
  std::vector<Json> out;  // replica 0's, one per stage: the copies run the same shapes
  for (auto& entry : it->second) {
    if (entry.first < static_cast<int>(r.spec.stages.size())) out.push_back(std::move(entry.second));
  }
  profiles.erase(it);
  return out;
}

void JobTable::setPlan(const std::string& id, Json plan, int64_t fromStep, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(id);
  plan["from_step"] = fromStep;
  plan["reason"] = reason;
  r.plans.push_back(std::move(plan));
  files_.save(r);
  changed(r);
}

std::vector<Json> JobTable::steps(const std::string& id, size_t from) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const JobRecord& r = find(id);
  if (from >= r.steps.size()) return {};
  return {r.steps.begin() + static_cast<std::ptrdiff_t>(from), r.steps.end()};
}

Json JobTable::store(const protocol::StoreRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  JobRecord& r = find(request.job);
  if (request.attempt != r.attempt || isTerminal(r.state)) {
    throw WireError("store request of job " + r.id + " attempt " + std::to_string(request.attempt) +
                    ", which is not the running attempt");
  }
  return r.rendezvous.answer(request, r.id);
}

std::vector<JobMetrics> JobTable::metrics() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const double now = wallSeconds();
  std::vector<JobMetrics> out;
  out.reserve(records_.size());
  for (const auto& entry : records_) {
    if (!entry.second.dryRun) out.push_back(jobMetrics(entry.second, now));  // `skytrain plan` is not a job
  }
  return out;
}

}  // namespace skytrain::daemon
