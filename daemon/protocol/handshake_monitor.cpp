#include "daemon/protocol/handshake_monitor.h"

#include <atomic>
#include <cstring>

#include "scheduler/error.h"

namespace skytrain::protocol {
namespace {

std::string monitorEndpoint() {
  static std::atomic<uint64_t> counter{0};
  return "inproc://skytrain-handshake-" + std::to_string(counter++);
}

constexpr int kEvents = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                        ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                        ZMQ_EVENT_DISCONNECTED;

}  // namespace

HandshakeMonitor::HandshakeMonitor(zmq::context_t& context, zmq::socket_t& socket, std::string endpoint,
                                   const ClientSecurity& security)
    : socket_(socket),
      pair_(context, zmq::socket_type::pair),
      endpoint_(std::move(endpoint)),
      keyName_(security.self.name),
      serverKey_(security.serverKey) {
  const std::string address = monitorEndpoint();
  if (zmq_socket_monitor(static_cast<void*>(socket_), address.c_str(), kEvents) != 0) {
    throw Error(std::string("cannot monitor a socket: ") + zmq_strerror(zmq_errno()));
  }
  pair_.set(zmq::sockopt::linger, 0);
  pair_.connect(address);
}

HandshakeMonitor::~HandshakeMonitor() { zmq_socket_monitor(static_cast<void*>(socket_), nullptr, 0); }

std::string HandshakeMonitor::explain(uint16_t event, uint32_t value) const {
  const std::string key = serverKey_.substr(0, 8) + "...";
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
    return "daemon " + endpoint_ + " refused key '" + keyName_ + "' (not in its authorized keys)";
  }
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL && value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH &&
      !serverKey_.empty()) {
    return "daemon " + endpoint_ + " does not use CURVE (an insecure daemon?)";
  }
  // Anything else: the server closed the connection mid-handshake. A CURVE server does that
  // without a word when it cannot open our HELLO (we hold the wrong server key), and to a
  // plaintext client.
  if (serverKey_.empty()) {
    return "daemon " + endpoint_ + " closed the connection during the handshake: it requires CURVE; give your "
           "secret key (--key or $SKYTRAIN_KEY) and the daemon's public key (known_daemons or --daemon-key)";
  }
  return "daemon " + endpoint_ + " closed the connection during the CURVE handshake: its public key is not " + key +
         " (check known_daemons or --daemon-key)";
}

bool HandshakeMonitor::dropped() {
  failure();
  return dropped_;
}

bool HandshakeMonitor::everConnected() {
  failure();
  return everConnected_;
}

std::optional<std::string> HandshakeMonitor::failure() {
  while (!failure_) {
    zmq::message_t event, address;
    if (!pair_.recv(event, zmq::recv_flags::dontwait)) break;
    if (event.more()) (void)pair_.recv(address, zmq::recv_flags::dontwait);
    if (event.size() < 6) continue;
    uint16_t id = 0;
    uint32_t value = 0;
    std::memcpy(&id, event.data(), 2);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, 4);
    if (id == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      handshakeDone_ = everConnected_ = true;
    } else if (id == ZMQ_EVENT_DISCONNECTED) {
      if (!handshakeDone_) failure_ = explain(id, value);
      dropped_ = dropped_ || handshakeDone_;
      handshakeDone_ = false;
    } else {
      failure_ = explain(id, value);
    }
  }
  return failure_;
}

}  // namespace skytrain::protocol
