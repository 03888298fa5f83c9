// KeptState: what a healing job's stage copy leaves on its daemon when its attempt stops,
// for the next attempt's copy (StageHost holds it; docs/operations.md, "Failures").
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "daemon/stage/state/checkpoint.h"

namespace skytrain::daemon {

// What a healing job's stage (protocol::heals) keeps when its attempt stops, for the next
// attempt's copy of it on this daemon: its state as of the last step it applied. Only a
// committed step is ever applied, so it is a step every copy of every stage agrees on.
struct KeptState {
  // Called by the worker that stops: `snapshot` is empty when it kept nothing.
  void deposit(int64_t step, std::optional<StageSnapshot> snapshot);
  // Waits until the worker has stopped (or `aborted`, or the timeout) and takes the state of
  // `step`; nullopt, with why in `missing`, when it kept none of that step.
  std::optional<StageSnapshot> take(int64_t step, std::chrono::milliseconds timeout,
                                    const std::function<bool()>& aborted, std::string& missing);
  // Frees the state if it was deposited before `before` and not taken; true when it was.
  bool expire(std::chrono::steady_clock::time_point before);

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool done_ = false;
  int64_t step_ = -1;
  std::optional<StageSnapshot> snapshot_;
  std::chrono::steady_clock::time_point at_;
};

}  // namespace skytrain::daemon
