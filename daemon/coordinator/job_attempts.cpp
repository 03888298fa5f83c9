// JobTable (job_table.h): a job's attempts, restarts, complete checkpoints and the story of
// its failures, which the coordinator drives and status shows.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

#include "daemon/protocol/base64.h"

#include "daemon/coordinator/job_table.h"
#include "daemon/ops/files.h"
#include "daemon/ops/timing.h"
#include "scheduler/error.h"

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
  r.rendezvous.clear();  // copies of the new attempt meet afresh
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

Json JobTable::store(const protocol::StoreRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  Record& r = find(request.job);
  if (request.attempt != r.attempt || isTerminal(r.state)) {
    throw WireError("store request of job " + r.id + " attempt " + std::to_string(request.attempt) +
                    ", which is not the running attempt");
  }
  auto& keys = r.rendezvous[request.stage];
  const std::string& key = request.keys.empty() ? std::string() : request.keys.front();
  if (request.op == "set" || request.op == "add") {
    if (!keys.count(key) && keys.size() >= protocol::kMaxStoreKeys) {
      throw WireError("the rendezvous store of job " + r.id + " stage " + std::to_string(request.stage) + " is full (" +
                      std::to_string(protocol::kMaxStoreKeys) + " keys)");
    }
  }
  if (request.op == "set") {
    keys[key] = request.value;
    return {{"ok", true}};
  }
  if (request.op == "get") {
    const auto it = keys.find(key);
    if (it == keys.end()) throw WireError("the rendezvous store has no key \"" + key.substr(0, 64) + "\"");
    return {{"ok", true}, {"value", protocol::base64Encode(it->second)}};
  }
  if (request.op == "add") {
    // c10d keeps counters as decimal text.
    int64_t value = 0;
    if (auto it = keys.find(key); it != keys.end()) {
      const std::string& text = it->second;
      if (text.empty() || text.size() > 20 || text.find_first_not_of("-0123456789") != std::string::npos) {
        throw WireError("the rendezvous key \"" + key.substr(0, 64) + "\" does not hold a counter");
      }
      value = std::strtoll(text.c_str(), nullptr, 10);
    }
    value += request.delta;
    keys[key] = std::to_string(value);
    return {{"ok", true}, {"value", value}};
  }
  if (request.op == "check") {
    bool present = true;
    for (const auto& k : request.keys) present = present && keys.count(k);
    return {{"ok", true}, {"present", present}};
  }
  if (request.op == "delete") return {{"ok", true}, {"deleted", keys.erase(key) > 0}};
  return {{"ok", true}, {"count", keys.size()}};  // "count"
}

}  // namespace skytrain::daemon
