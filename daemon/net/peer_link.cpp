#include "daemon/net/peer_link.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "daemon/protocol/handshake_monitor.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPingIntervalMs = 1000;
// ZMTP's own ping time-out is off (an hour): a ping queued behind megabytes on a slow link
// would miss any short one. TCP_USER_TIMEOUT judges the connection instead.
constexpr int kPingTimeoutMs = 3600 * 1000;
// A first connection is given longer than a live one may go silent: a CURVE handshake to a
// daemon that is starting, on a loaded machine.
constexpr double kFirstConnectionFactor = 3;
constexpr double kMinFirstConnectionS = 10;

class ZmqPeerLink : public PeerLink {
 public:
  ZmqPeerLink(zmq::context_t& context, const std::string& remote, const protocol::ClientSecurity& security,
              FrameQueue& inbound, double livenessS)
      : socket_(context, zmq::socket_type::dealer),
        remote_(remote),
        inbound_(inbound),
        livenessS_(livenessS),
        created_(Clock::now()) {
    protocol::applyClientSecurity(socket_, security);
    socket_.set(zmq::sockopt::linger, 1000);
    socket_.set(zmq::sockopt::sndhwm, 0);  // the schedule bounds frames in flight
    socket_.set(zmq::sockopt::heartbeat_ivl, kPingIntervalMs);
    socket_.set(zmq::sockopt::heartbeat_timeout, kPingTimeoutMs);
    socket_.set(zmq::sockopt::tcp_maxrt, static_cast<int>(std::clamp(livenessS * 1000, 1000.0, 3600e3)));
    monitor_ = std::make_unique<protocol::HandshakeMonitor>(context, socket_, remote, security);
    try {
      socket_.connect(remote);
    } catch (const zmq::error_t& e) {
      throw PeerError("cannot connect to data endpoint \"" + remote + "\": " + e.what());
    }
  }

  void send(const compression::TensorFrame& frame) override {
    const std::string header = compression::encodeFrameHeader(frame);
    const auto& payload = frame.tensor.payload;
    socket_.send(zmq::buffer(header), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(payload), zmq::send_flags::none);
    bytesSent_ += header.size() + payload.size();
  }

  std::optional<compression::TensorFrame> recv(std::chrono::milliseconds timeout) override {
    return inbound_.pop(timeout);
  }

  uint64_t bytesSent() const override { return bytesSent_; }

  std::optional<std::string> failure() override {
    if (auto refused = monitor_->failure()) return "data endpoint: " + *refused;
    if (monitor_->dropped()) {
      return "the data connection to " + remote_ + " dropped (reset, or nothing acknowledged within " +
             fmt::format("{:g}", livenessS_) + " s: a cut data port, a stopped daemon, or a frame over its max_frame_mb); " +
             "frames in flight on it are lost";
    }
    const double firstS = std::max(kMinFirstConnectionS, kFirstConnectionFactor * livenessS_);
    if (!monitor_->everConnected() && Clock::now() - created_ > std::chrono::duration<double>(firstS)) {
      return "no connection to data endpoint " + remote_ + " within " + fmt::format("{:g}", firstS) +
             " s (is its data port reachable from here?)";
    }
    return std::nullopt;
  }

 private:
  zmq::socket_t socket_;  // owned by the stage worker thread
  std::string remote_;
  FrameQueue& inbound_;
  double livenessS_;
  Clock::time_point created_;
  std::unique_ptr<protocol::HandshakeMonitor> monitor_;  // after socket_: stops before it closes
  uint64_t bytesSent_ = 0;
};

}  // namespace

std::unique_ptr<PeerLink> makeZmqPeerLink(zmq::context_t& context, const std::string& remoteData,
                                          const protocol::ClientSecurity& security, FrameQueue& inbound,
                                          double livenessS) {
  return std::make_unique<ZmqPeerLink>(context, remoteData, security, inbound, livenessS);
}

}  // namespace skytrain::daemon
