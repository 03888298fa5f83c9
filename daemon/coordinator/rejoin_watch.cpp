#include "daemon/coordinator/rejoin_watch.h"

namespace skytrain::daemon {

RejoinWatch::RejoinWatch(std::vector<int> slots, double intervalS, Connect connect)
    : slots_(std::move(slots)),
      interval_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(intervalS))),
      connect_(std::move(connect)) {}

void RejoinWatch::poll() {
  const auto now = std::chrono::steady_clock::now();
  const bool due = now >= nextPing_;
  for (int slot : slots_) {
    try {
      // One ping at a time: a daemon that stays down must not fill the socket's queue (a
      // blocked send would stop the coordinator's commits); one unanswered for three
      // intervals is dropped with its connection.
      auto& client = clients_[slot];
      if (client) {
        while (auto reply = client->tryReceive()) {
          if (reply->value("ok", false)) answered_[slot] = now;
          asked_.erase(slot);
        }
      }
      if (!due) continue;
      if (asked_.count(slot) && now - asked_[slot] > 3 * interval_) client.reset(), asked_.erase(slot);
      if (asked_.count(slot)) continue;
      if (!client) client = connect_(slot);
      client->post({{"type", protocol::kPing}, {"id", id_++}});
      asked_[slot] = now;
    } catch (const std::exception&) {  // unreachable for now: asked again at the next interval
    }
  }
  if (due) nextPing_ = now + interval_;
}

bool RejoinWatch::answering(int slot) const {
  const auto it = answered_.find(slot);
  return it != answered_.end() && std::chrono::steady_clock::now() - it->second < 3 * interval_;
}

}  // namespace skytrain::daemon
