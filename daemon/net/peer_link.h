// PeerLink: a stage's link to one neighbouring stage. send() goes out over a DEALER to the
// neighbour daemon's data endpoint (ZeroMQ's I/O thread writes while the stage computes);
// recv() takes frames the data thread routed to this stage's mailbox.
//
// Liveness of the data path itself, apart from the control port's heartbeats: the DEALER
// sends a ZMTP ping every second while idle, and TCP gives up on a connection whose data or
// pings go unacknowledged for `livenessS` (TCP_USER_TIMEOUT): a slow link is acknowledged
// segment by segment and stays up, a partitioned one is dropped. A dropped connection has
// lost what was in flight on it, so failure() reports it, and a data endpoint that never
// completes a handshake, for the stage to fail at once rather than after peer_timeout_s.
#pragma once

#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "compression/wire/tensor_frame.h"
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
  // Why the outgoing connection can no longer be trusted (refused, dropped, never made),
  // else nullopt. Cheap: called between waits for frames.
  virtual std::optional<std::string> failure() { return std::nullopt; }
};

// `remoteData` is the neighbour daemon's data endpoint; `inbound` the mailbox queue that
// receives that neighbour's frames. Owned and used by one stage worker thread.
// `security` authenticates this daemon to the neighbour's data endpoint (CURVE).
// `livenessS` bounds how long the connection may go unacknowledged (see above).
std::unique_ptr<PeerLink> makeZmqPeerLink(zmq::context_t& context, const std::string& remoteData,
                                          const protocol::ClientSecurity& security, FrameQueue& inbound,
                                          double livenessS);

}  // namespace skytrain::daemon
