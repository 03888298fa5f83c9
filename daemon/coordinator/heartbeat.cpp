#include "daemon/coordinator/heartbeat.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

#include "daemon/ops/timing.h"
#include "daemon/protocol/messages.h"
#include "daemon/protocol/printable.h"

namespace skytrain::daemon {

HeartbeatMonitor::HeartbeatMonitor(zmq::context_t& context, std::string jobId, std::vector<HeartbeatTarget> stages,
                                   double intervalS, int misses)
    : context_(context), jobId_(std::move(jobId)), stages_(std::move(stages)), intervalS_(intervalS), misses_(misses),
      lost_(stages_.size()), finished_(stages_.size(), false) {
  thread_ = std::thread([this] { run(); });
}

HeartbeatMonitor::~HeartbeatMonitor() {
  stopping_ = true;
  thread_.join();
}

std::optional<HeartbeatMonitor::Lost> HeartbeatMonitor::lost() const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < lost_.size(); ++i) {
    if (!lost_[i].empty() && !finished_[i]) return Lost{static_cast<int>(i), lost_[i]};
  }
  return std::nullopt;
}

void HeartbeatMonitor::finished(int stage) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stage >= 0 && stage < static_cast<int>(finished_.size())) finished_[stage] = true;
}

void HeartbeatMonitor::run() {
  const size_t n = stages_.size();
  std::vector<std::unique_ptr<protocol::ControlClient>> clients(n);
  std::vector<Clock::time_point> lastAnswer(n, Clock::now());
  uint64_t id = 1;
  auto declare = [&](size_t i, const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (lost_[i].empty()) lost_[i] = stages_[i].name + " (" + stages_[i].endpoint + ") lost: " + why;
  };
  auto isFinished = [&](size_t i) {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<bool>(finished_[i]);
  };
  auto nextBeat = Clock::now();
  auto lastTurn = Clock::now();
  while (!stopping_) {
    // A turn comes every interval/10 at most: a longer gap means this process did not run
    // (SIGSTOP, a frozen VM), so the silence was ours, not the stages'; their clocks restart.
    const auto turn = Clock::now();
    if (std::chrono::duration<double>(turn - lastTurn).count() > intervalS_) {
      spdlog::warn("job {}: this daemon did not run for {:.1f} s; heartbeat clocks restart", jobId_,
                   std::chrono::duration<double>(turn - lastTurn).count());
      std::fill(lastAnswer.begin(), lastAnswer.end(), turn);
      nextBeat = turn;
    }
    lastTurn = turn;
    if (Clock::now() >= nextBeat) {
      for (size_t i = 0; i < n; ++i) {
        if (isFinished(i)) continue;
        try {
          if (!clients[i]) clients[i] = std::make_unique<protocol::ControlClient>(context_, stages_[i].endpoint, stages_[i].security);
          protocol::StageHeartbeat beat;
          beat.job = jobId_;
          beat.stage = stages_[i].stage;
          beat.replica = stages_[i].replica;
          beat.complete = complete_.load();
          auto message = protocol::toJson(beat);
          message["id"] = id++;
          clients[i]->post(message);
        } catch (const std::exception& e) {
          spdlog::warn("job {}: heartbeat to {}: {}", jobId_, stages_[i].name, e.what());
        }
      }
      nextBeat += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(intervalS_));
    }
    for (size_t i = 0; i < n; ++i) {
      if (!clients[i] || isFinished(i)) continue;
      try {
        while (auto reply = clients[i]->tryReceive()) {
          if (reply->value("ok", false)) {
            lastAnswer[i] = Clock::now();
          } else if (reply->contains("killed")) {  // its sentinel, with the kernel's verdict
            declare(i, protocol::printable(reply->value("error", std::string("?")), 1024) +
                           (stages_[i].admission.empty() ? "" : "; " + stages_[i].admission));
          } else {  // "freed": the daemon freed the stage, and says why; else it lost it
            const std::string error = protocol::printable(reply->value("error", std::string("?")), 1024);
            declare(i, "its daemon answered \"" + error + "\"" +
                           (reply->contains("freed") ? "" : " (it restarted and lost the stage?)"));
          }
        }
      } catch (const std::exception& e) {
        declare(i, std::string("bad heartbeat reply: ") + e.what());
      }
      const double silent = secondsSince(lastAnswer[i]);
      if (silent > intervalS_ * misses_) {
        char why[160];
        std::snprintf(why, sizeof why, "no heartbeat answer for %.1f s (%d missed at %.2f s; dead, hung or cut off)",
                      silent, misses_, intervalS_);
        declare(i, why);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::max(5, static_cast<int>(intervalS_ * 1000 / 10))));
  }
}

}  // namespace skytrain::daemon
