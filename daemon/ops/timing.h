// Wall-clock helpers for measuring steps and compute.
#pragma once

#include <chrono>

namespace skytrain::daemon {

using Clock = std::chrono::steady_clock;

// Seconds since the Unix epoch, for records people read.
inline double wallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Adds the duration of a scope to a counter.
class Timed {
 public:
  explicit Timed(double& total) : total_(total), start_(Clock::now()) {}
  ~Timed() { total_ += secondsSince(start_); }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  double& total_;
  Clock::time_point start_;
};

}  // namespace skytrain::daemon
