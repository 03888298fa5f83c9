#include "daemon/ops/log_limiter.h"

#include <spdlog/spdlog.h>

namespace skytrain::daemon {

LogLimiter::LogLimiter(std::string kind, int burst, std::chrono::seconds window)
    : kind_(std::move(kind)), burst_(burst), window_(window), windowStart_(std::chrono::steady_clock::now()) {}

LogLimiter::~LogLimiter() {
  std::lock_guard<std::mutex> lock(mutex_);
  flushLocked(std::chrono::steady_clock::now(), true);
}

void LogLimiter::warn(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  flushLocked(std::chrono::steady_clock::now(), false);
  if (logged_ < burst_) {
    ++logged_;
    spdlog::warn("{} {}", kind_, message);
    if (logged_ == burst_) spdlog::warn("{}: more than {} in {} s; counting the rest", kind_, burst_, window_.count());
    return;
  }
  ++suppressed_;
  ++suppressedTotal_;
}

void LogLimiter::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  flushLocked(std::chrono::steady_clock::now(), false);
}

uint64_t LogLimiter::suppressedTotal() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return suppressedTotal_;
}

void LogLimiter::flushLocked(std::chrono::steady_clock::time_point now, bool force) {
  if (!force && now - windowStart_ < window_) return;
  if (suppressed_ > 0) {
    spdlog::warn("{}: {} more like these in the last {} s, not logged", kind_, suppressed_,
                 std::chrono::duration_cast<std::chrono::seconds>(now - windowStart_).count());
  }
  windowStart_ = now;
  logged_ = 0;
  suppressed_ = 0;
}

}  // namespace skytrain::daemon
