// RejoinWatch: the coordinator's eye on the stage copies of a healing job's pipelines that
// left (docs/operations.md, "Failures"): it pings each one's daemon every interval, without
// blocking, and says which answer. Polled by the coordinator thread, which owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "daemon/protocol/control.h"

namespace skytrain::daemon {

class RejoinWatch {
 public:
  using Connect = std::function<std::unique_ptr<protocol::ControlClient>(int slot)>;
  RejoinWatch(std::vector<int> slots, double intervalS, Connect connect);

  // Reads the answers that came and sends the pings that are due.
  void poll();
  // Whether the daemon of `slot` answered within the last three intervals.
  bool answering(int slot) const;
  bool empty() const { return slots_.empty(); }

 private:
  using Time = std::chrono::steady_clock::time_point;
  std::vector<int> slots_;
  std::chrono::steady_clock::duration interval_;
  Connect connect_;
  std::map<int, std::unique_ptr<protocol::ControlClient>> clients_;
  std::map<int, Time> answered_, asked_;
  Time nextPing_ = std::chrono::steady_clock::now();
  uint64_t id_ = 1;
};

}  // namespace skytrain::daemon
