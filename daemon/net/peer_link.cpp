#include "daemon/net/peer_link.h"

#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

class ZmqPeerLink : public PeerLink {
 public:
  ZmqPeerLink(zmq::context_t& context, const std::string& remote, const protocol::ClientSecurity& security,
              FrameQueue& inbound)
      : socket_(context, zmq::socket_type::dealer), remote_(remote), inbound_(inbound) {
    protocol::applyClientSecurity(socket_, security);
    socket_.set(zmq::sockopt::linger, 1000);
    socket_.set(zmq::sockopt::sndhwm, 0);  // the schedule bounds frames in flight
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

 private:
  zmq::socket_t socket_;  // owned by the stage worker thread
  std::string remote_;
  FrameQueue& inbound_;
  uint64_t bytesSent_ = 0;
};

}  // namespace

std::unique_ptr<PeerLink> makeZmqPeerLink(zmq::context_t& context, const std::string& remoteData,
                                          const protocol::ClientSecurity& security, FrameQueue& inbound) {
  return std::make_unique<ZmqPeerLink>(context, remoteData, security, inbound);
}

}  // namespace skytrain::daemon
