// ZapHandler: the ZeroMQ authentication handler (ZAP, RFC 27) of a daemon's CURVE servers.
// It admits a connection only when the client's public key is in the AccessList, and sets
// the connection's User-Id to that key, so every message on it is attributed to the key.
// ZeroMQ admits every CURVE client when no handler is bound, so the handler is bound in the
// constructor, before any server socket.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <thread>
#include <vector>

#include "daemon/net/access.h"
#include "daemon/ops/log_limiter.h"

namespace skytrain::daemon {

class ZapHandler {
 public:
  ZapHandler(zmq::context_t& context, const AccessList& access, SecurityCounters& counters);
  ~ZapHandler();  // stops and joins

 private:
  void run();
  // The reply's status code and text, and the User-Id, for one request's frames.
  std::vector<std::string> answer(const std::vector<zmq::message_t>& request);

  const AccessList& access_;
  SecurityCounters& counters_;
  LogLimiter refusals_{"security: refused"};  // a handshake flood logs a summary, not a line each
  zmq::socket_t socket_;  // REP on inproc://zeromq.zap.01; owned by thread_ once started
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// Makes a socket a CURVE server with this daemon's key pair (the ZAP handler vets clients).
void applyCurveServer(zmq::socket_t& socket, const protocol::KeyPair& self);

// The User-Id ZAP gave the connection a message came over ("" when there is none).
std::string userIdOf(const zmq::message_t& message);

}  // namespace skytrain::daemon
