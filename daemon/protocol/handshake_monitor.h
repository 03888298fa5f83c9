// HandshakeMonitor: watches one client socket's ZeroMQ events so that a refused key or a
// wrong server key is reported at once, with the reason, instead of as a time-out.
#pragma once

#include <zmq.hpp>

#include <optional>
#include <string>

#include "daemon/protocol/control.h"

namespace skytrain::protocol {

class HandshakeMonitor {
 public:
  // Call before socket.connect(). Owned by the thread that owns the socket.
  HandshakeMonitor(zmq::context_t& context, zmq::socket_t& socket, std::string endpoint,
                   const ClientSecurity& security);
  ~HandshakeMonitor();

  // Reads the events so far; a sentence saying why the handshake failed, else nullopt.
  std::optional<std::string> failure();
  // Whether a connection that completed its handshake has dropped since (ZeroMQ reconnects
  // on its own, but what was in flight on the old connection is lost). Reads the events.
  bool dropped();
  // Whether a handshake has ever completed. Reads the events.
  bool everConnected();
  // For polling beside the monitored socket.
  zmq::socket_t& events() { return pair_; }

 private:
  std::string explain(uint16_t event, uint32_t value) const;

  zmq::socket_t& socket_;
  zmq::socket_t pair_;  // receives the monitored socket's events
  std::string endpoint_;
  std::string keyName_;
  std::string serverKey_;
  bool handshakeDone_ = false;
  bool everConnected_ = false;
  bool dropped_ = false;
  std::optional<std::string> failure_;
};

}  // namespace skytrain::protocol
