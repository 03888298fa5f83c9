// PeerLink: a stage's link to one neighbouring stage. send() goes out over a DEALER to the
// neighbour daemon's data endpoint (ZeroMQ's I/O thread writes while the stage computes);
// recv() takes frames the data thread routed to this stage's mailbox.
#pragma once

#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "compression/tensor_frame.h"
#include "daemon/net/mailbox.h"
#include "daemon/protocol/control.h"

namespace skytrain::daemon {

class PeerLink {
 public:
  virtual ~PeerLink() = default;
  virtual void send(const compression::TensorFrame& frame) = 0;
  virtual std::optional<compression::TensorFrame> recv(std::chrono::milliseconds timeout) = 0;
  // Bytes handed to the network so far (headers and payloads).
  virtual uint64_t bytesSent() const = 0;
};

// `remoteData` is the neighbour daemon's data endpoint; `inbound` the mailbox queue that
// receives that neighbour's frames. Owned and used by one stage worker thread.
// `security` authenticates this daemon to the neighbour's data endpoint (CURVE).
std::unique_ptr<PeerLink> makeZmqPeerLink(zmq::context_t& context, const std::string& remoteData,
                                          const protocol::ClientSecurity& security, FrameQueue& inbound);

}  // namespace skytrain::daemon
