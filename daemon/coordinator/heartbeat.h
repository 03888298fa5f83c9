// HeartbeatMonitor: the coordinator's side of the failure detector. A thread sends each
// stage daemon a stage.heartbeat every interval over its own connection; the daemon's
// control thread answers it even while the stage computes. A stage whose daemon has not
// answered for `misses` intervals (dead, hung, cut off), or answers that it no longer hosts
// the stage (restarted), is lost. A daemon the kernel killed for memory is answered for by
// its sentinel (daemon/sentinel.h): the stage is lost with the kernel's verdict and what
// admission estimated.
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
  int stage = 0, replica = 0;  // what the heartbeat names
  std::string name;            // "stage 1", "stage 1 replica 2": for messages
  std::string admission;       // what its admission estimated, added to a kill for memory
};

class HeartbeatMonitor {
 public:
  HeartbeatMonitor(zmq::context_t& context, std::string jobId, std::vector<HeartbeatTarget> stages,
                   double intervalS, int misses);
  ~HeartbeatMonitor();  // stops and joins

  // The first target (an index into the targets) found lost, with why; nullopt while all answer.
  struct Lost {
    int stage = 0;  // the target's index: a slot
    std::string why;
  };
  std::optional<Lost> lost() const;
  // The stage reported done: its daemon may free it, so it is watched no more.
  void finished(int stage);
  // The newest checkpoint every stage has confirmed, sent with each heartbeat: the stages
  // keep it whatever they prune (a stage whose own later checkpoints were written while
  // another's failed would otherwise prune the only one a restart can use).
  void setComplete(int64_t step) { complete_ = step; }

 private:
  void run();

  zmq::context_t& context_;
  std::string jobId_;
  std::vector<HeartbeatTarget> stages_;
  double intervalS_;
  int misses_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> complete_{-1};
  mutable std::mutex mutex_;  // guards lost_ and finished_
  std::vector<std::string> lost_;  // per stage: why it was lost; empty while it answers
  std::vector<bool> finished_;
  std::thread thread_;  // owns a DEALER per stage daemon
};

}  // namespace skytrain::daemon
