#include "daemon/coordinator/stage_fleet.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <thread>
#include <utility>

#include "daemon/protocol/messages.h"

namespace skytrain::daemon {

StageFleet::StageFleet(zmq::context_t& context, const protocol::JobSpec& spec, std::string jobId,
                       protocol::KeyPair self, std::vector<std::string> stageKeys)
    : context_(context), spec_(spec), jobId_(std::move(jobId)), self_(std::move(self)), stageKeys_(std::move(stageKeys)) {}

int StageFleet::slots() const { return protocol::slotCount(spec_); }

bool StageFleet::isActive(int slot) const {
  return pipelines_.empty() ||
         std::find(pipelines_.begin(), pipelines_.end(), protocol::replicaOfSlot(spec_, slot)) != pipelines_.end();
}

void StageFleet::setPipelines(std::vector<int> pipelines) {
  std::sort(pipelines.begin(), pipelines.end());
  pipelines.erase(std::unique(pipelines.begin(), pipelines.end()), pipelines.end());
  pipelines_ = pipelines.size() == static_cast<size_t>(protocol::replicaCount(spec_)) ? std::vector<int>{} : pipelines;
}

std::vector<int> StageFleet::activePipelines() const {
  if (!pipelines_.empty()) return pipelines_;
  std::vector<int> all;
  for (int r = 0; r < protocol::replicaCount(spec_); ++r) all.push_back(r);
  return all;
}

std::unique_ptr<protocol::ControlClient> StageFleet::connect(int slot) const {
  return std::make_unique<protocol::ControlClient>(context_, protocol::placementOf(spec_, slot).daemon,
                                                   protocol::ClientSecurity{self_, stageKeys_[slot]});
}

nlohmann::json StageFleet::addressed(nlohmann::json message, int slot) const {
  message["job"] = jobId_;
  message["stage"] = protocol::stageOfSlot(spec_, slot);
  if (protocol::replicaOfSlot(spec_, slot) > 0) message["replica"] = protocol::replicaOfSlot(spec_, slot);
  return message;
}

void StageFleet::request(const nlohmann::json& message, std::chrono::milliseconds timeout) const {
  for (int i = 0; i < slots(); ++i) {
    if (isActive(i)) connect(i)->request(addressed(message, i), timeout);
  }
}

protocol::ControlClient& StageFleet::kept(int slot) {
  kept_.resize(slots());
  if (!kept_[slot]) kept_[slot] = connect(slot);
  return *kept_[slot];
}

void StageFleet::post(const nlohmann::json& message) {
  for (int i = 0; i < slots(); ++i) {
    if (!isActive(i)) continue;
    try {
      auto& client = kept(i);
      client.post(addressed(message, i));
      while (client.tryReceive()) {
      }
    } catch (const std::exception& e) {
      spdlog::warn("job {}: {} to {}: {}", jobId_, message.value("type", "?"), protocol::describeSlot(spec_, i), e.what());
    }
  }
}

void StageFleet::abort(const std::set<std::string>& skip) {
  for (int i = 0; i < slots(); ++i) {
    if (!isActive(i) || skip.count(protocol::placementOf(spec_, i).daemon)) continue;  // the others stopped when they left
    try {
      kept(i).request(addressed({{"type", protocol::kStageAbort}}, i), std::chrono::milliseconds(2000));
    } catch (const std::exception& e) {
      spdlog::warn("job {}: could not abort {}: {}", jobId_, protocol::describeSlot(spec_, i), e.what());
    }
  }
}

bool StageFleet::waitUntilAnswering(std::chrono::duration<double> timeout, const std::atomic<bool>& stopping) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  double backoff = 0.25;
  while (!stopping) {
    bool all = true;
    for (int i = 0; i < slots() && all; ++i) {
      if (!isActive(i)) continue;  // a healing job's pipeline that left rejoins when it answers
      try {
        connect(i)->request({{"type", protocol::kPing}}, std::chrono::milliseconds(1000));
      } catch (const std::exception&) {
        all = false;
      }
    }
    if (all) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    backoff = std::min(backoff * 2, 5.0);
  }
  return false;
}

std::vector<int> StageFleet::wholePipelines(std::set<std::string>& silent) const {
  std::map<std::string, bool> answers;  // by daemon: one ping each
  auto answering = [&](int slot) {
    const std::string& daemon = protocol::placementOf(spec_, slot).daemon;
    if (!answers.count(daemon)) {
      try {
        connect(slot)->request({{"type", protocol::kPing}}, std::chrono::milliseconds(1000));
        answers[daemon] = true;
      } catch (const std::exception&) {
        answers[daemon] = false;
        silent.insert(daemon);
      }
    }
    return answers[daemon];
  };
  std::vector<int> whole;
  for (int r : activePipelines()) {
    bool all = true;
    for (int i = 0; i < static_cast<int>(spec_.stages.size()); ++i) all = answering(protocol::slotOf(spec_, i, r)) && all;
    if (all) whole.push_back(r);
  }
  return whole;
}

}  // namespace skytrain::daemon
