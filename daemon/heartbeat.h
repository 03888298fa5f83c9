// HeartbeatMonitor: the coordinator's side of the failure detector. A thread sends each
// stage daemon a stage.heartbeat every interval over its own connection; the daemon's
// control thread answers it even while the stage computes. A stage whose daemon has not
// answered for `misses` intervals (dead, hung, cut off), or answers that it no longer hosts
// the stage (restarted), is lost.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/protocol/control.h"

namespace skytrain::daemon {

struct HeartbeatTarget {
  std::string endpoint;  // the stage daemon's control endpoint
  protocol::ClientSecurity security;
};

class HeartbeatMonitor {
 public:
  HeartbeatMonitor(zmq::context_t& context, std::string jobId, std::vector<HeartbeatTarget> stages,
                   double intervalS, int misses);
  ~HeartbeatMonitor();  // stops and joins

  // The first stage found lost, with why and how long it was silent; nullopt while all answer.
  std::optional<std::string> lost() const;

 private:
  void run();

  zmq::context_t& context_;
  std::string jobId_;
  std::vector<HeartbeatTarget> stages_;
  double intervalS_;
  int misses_;
  std::atomic<bool> stopping_{false};
  mutable std::mutex mutex_;  // guards lost_
  std::optional<std::string> lost_;
  std::thread thread_;  // owns a DEALER per stage daemon
};

}  // namespace skytrain::daemon
