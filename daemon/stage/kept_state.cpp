#include "daemon/stage/kept_state.h"

#include "daemon/stage/runner/stage_context.h"

namespace skytrain::daemon {

void KeptState::deposit(int64_t step, std::optional<StageSnapshot> snapshot) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    step_ = step;
    snapshot_ = std::move(snapshot);
    at_ = std::chrono::steady_clock::now();
  }
  changed_.notify_all();
}

std::optional<StageSnapshot> KeptState::take(int64_t step, std::chrono::milliseconds timeout,
                                             const std::function<bool()>& aborted, std::string& missing) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done_) {
    if (aborted()) throw Aborted{};
    if (std::chrono::steady_clock::now() > deadline) {
      missing = "its earlier copy here did not stop within " + std::to_string(timeout.count() / 1000) + " s";
      return std::nullopt;
    }
    changed_.wait_for(lock, std::chrono::milliseconds(50));
  }
  std::optional<StageSnapshot> out = std::move(snapshot_);
  snapshot_.reset();  // whatever the outcome: only one attempt may take it
  if (!out) {
    missing = "this daemon kept none (it finished, restarted or never had any)";
  } else if (step_ != step) {
    missing = "this daemon kept the state after step " + std::to_string(step_ + 1) + ", not " + std::to_string(step + 1);
    out.reset();
  }
  return out;
}

bool KeptState::expire(std::chrono::steady_clock::time_point before) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!done_ || at_ >= before) return false;
  snapshot_.reset();
  return true;
}

}  // namespace skytrain::daemon
