// StageFleet: the stage copies of one job as its coordinator reaches them — a control client
// to each slot's daemon, which pipelines train, and the requests every slot that trains gets.
// Owned and used by the coordinator thread alone.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "daemon/protocol/control.h"
#include "daemon/protocol/spec/job_spec.h"

namespace skytrain::daemon {

class StageFleet {
 public:
  // How long a stage request waits for its reply (prepare, start, plan, profile).
  static constexpr std::chrono::milliseconds kRequestTimeout{5000};

  // `spec` must outlive the fleet; `stageKeys`: per slot, its daemon's public key ("" when insecure).
  StageFleet(zmq::context_t& context, const protocol::JobSpec& spec, std::string jobId, protocol::KeyPair self,
             std::vector<std::string> stageKeys);

  int slots() const;
  // Whether the slot's pipeline trains. A healing job's pipeline that left does not until it rejoins.
  bool isActive(int slot) const;
  // The pipelines that train, sorted and unique; every one of them: empty.
  const std::vector<int>& pipelines() const { return pipelines_; }
  void setPipelines(std::vector<int> pipelines);
  // The pipelines that train, listed (all of them when pipelines() is empty).
  std::vector<int> activePipelines() const;

  // A new control client to the daemon of a slot (a stage's copy, job_spec.h), authenticated by its key.
  std::unique_ptr<protocol::ControlClient> connect(int slot) const;
  // A stage request addressed to a slot's stage and replica of this job.
  nlohmann::json addressed(nlohmann::json message, int slot) const;
  // Requests `message` of every slot that trains, in slot order; throws on the first refusal.
  void request(const nlohmann::json& message, std::chrono::milliseconds timeout) const;
  // Posts `message` to every slot that trains on the connection kept for it, without waiting
  // for the replies; a slot that cannot be reached is logged, not thrown.
  void post(const nlohmann::json& message);
  // Aborts the copies that train, except on the daemons in `skip`, through post's
  // connections: a copy applies a commit posted there before it stops.
  void abort(const std::set<std::string>& skip = {});
  // A new attempt's posts go out on new connections.
  void dropConnections() { kept_.clear(); }
  // Pings the daemon of every slot that trains, backing off from 0.25 s to 5 s, until all
  // answer (true), or `timeout` has passed or `stopping` is set (false).
  bool waitUntilAnswering(std::chrono::duration<double> timeout, const std::atomic<bool>& stopping) const;
  // The active pipelines whose slots' daemons all answer a ping now; adds the daemons that do
  // not to `silent`.
  std::vector<int> wholePipelines(std::set<std::string>& silent) const;

 private:
  protocol::ControlClient& kept(int slot);

  zmq::context_t& context_;
  const protocol::JobSpec& spec_;
  std::string jobId_;
  protocol::KeyPair self_;
  std::vector<std::string> stageKeys_;
  std::vector<int> pipelines_;                                  // empty: all
  std::vector<std::unique_ptr<protocol::ControlClient>> kept_;  // post's, per slot
};

}  // namespace skytrain::daemon
