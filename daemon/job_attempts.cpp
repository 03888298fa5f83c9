// JobTable (job_table.h): a job's attempts, restarts, complete checkpoints and the story of
// its failures, which the coordinator drives and status shows.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/files.h"
#include "daemon/job_table.h"
#include "daemon/timing.h"

namespace skytrain::daemon {

bool JobTable::reopen(const std::string& id, const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  Record& r = find(id);
  if (r.state != JobState::Failed && r.state != JobState::Cancelled) return false;
  r.state = JobState::Preparing;
  r.error.clear();
  r.finishedAt = 0;
  r.restarts = 0;
  r.events.push_back({{"time", wallSeconds()}, {"step", r.steps.size()}, {"message", why}});
  persist(r);
  changed(r);
  return true;
}

void JobTable::beginAttempt(const std::string& id, int attempt, int64_t fromStep) {
  std::lock_guard<std::mutex> lock(mutex_);
  Record& r = find(id);
  r.attempt = attempt;
  r.stagesDone.clear();
  r.pending.clear();
  r.profiles.clear();
  r.confirmations.clear();
  r.stageFailure.reset();
  const size_t keep = static_cast<size_t>(fromStep + 1);
  if (r.steps.size() > keep) {
    r.steps.resize(keep);
    std::string rows;
    for (const auto& row : r.steps) rows += row.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    writeFileAtomic(jobDir(r.id) + "/metrics.jsonl", rows);
  }
  r.evals.erase(std::remove_if(r.evals.begin(), r.evals.end(),
                               [&](const Json& e) { return e["step"].get<int64_t>() > fromStep; }),
                r.evals.end());
  if (!isTerminal(r.state)) r.state = JobState::Running;
  persist(r);
  changed(r);
}

int JobTable::attempts(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return find(id).attempt;
}

int JobTable::restarts(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return find(id).restarts;
}

void JobTable::countRestart(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Record& r = find(id);
  ++r.restarts;
  persist(r);
}

std::optional<std::string> JobTable::stageFailure(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return find(id).stageFailure;
}

int64_t JobTable::lastCheckpoint(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Record& r = find(id);
  return r.checkpoints.empty() ? -1 : r.checkpoints.back();
}

void JobTable::dropCheckpoint(const std::string& id, int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  Record& r = find(id);
  r.checkpoints.erase(std::remove(r.checkpoints.begin(), r.checkpoints.end(), step), r.checkpoints.end());
  persist(r);
}

void JobTable::addEvent(const std::string& id, const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  Record& r = find(id);
  r.events.push_back({{"time", wallSeconds()}, {"step", r.steps.size()}, {"message", message}});
  spdlog::info("job {}: {}", id, message);
  persist(r);
  changed(r);
}

}  // namespace skytrain::daemon
