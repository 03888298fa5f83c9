// A warning that a peer can repeat at will (a dropped frame, a refused request) is logged a
// few times a window, then counted: a flood of 100,000 frames writes ~20 lines and one
// summary, not 100,000. The counters in /metrics and ping keep every event.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace skytrain::daemon {

class LogLimiter {
 public:
  // At most `burst` lines of `kind` ("data: dropped") per window; the rest are summed up.
  explicit LogLimiter(std::string kind, int burst = 20, std::chrono::seconds window = std::chrono::seconds(10));
  ~LogLimiter();  // flushes

  // Logs "<kind> <message>" at warning level, or counts it when the window's burst is spent.
  void warn(const std::string& message);
  // Logs the summary of a window that has ended ("<kind>: N more like these in the last
  // 10 s, not logged"). Call it now and then (an event loop's idle turn); warn() does too.
  void flush();
  uint64_t suppressedTotal() const;

 private:
  void flushLocked(std::chrono::steady_clock::time_point now, bool force);

  const std::string kind_;
  const int burst_;
  const std::chrono::seconds window_;
  mutable std::mutex mutex_;
  std::chrono::steady_clock::time_point windowStart_;
  int logged_ = 0;            // in this window
  uint64_t suppressed_ = 0;   // in this window
  uint64_t suppressedTotal_ = 0;
};

}  // namespace skytrain::daemon
