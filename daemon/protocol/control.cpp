#include "daemon/protocol/control.h"

#include "daemon/protocol/handshake_monitor.h"
#include "daemon/protocol/json_reader.h"
#include "scheduler/error.h"

namespace skytrain::protocol {

bool waitReadable(zmq::socket_t& socket, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{static_cast<void*>(socket), 0, ZMQ_POLLIN, 0};
  try {
    return zmq::poll(&item, 1, timeout) > 0;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;
    throw;
  }
}

Json errorReply(const std::string& message, const std::string& path) {
  Json reply = {{"ok", false}, {"error", message}};
  if (!path.empty()) reply["path"] = path;
  return reply;
}

Json parseControlMessage(const void* data, size_t size) {
  if (size > kMaxControlMessageBytes) {
    throw WireError("control message of " + std::to_string(size) + " bytes: the limit is " +
                    std::to_string(kMaxControlMessageBytes));
  }
  Json message;
  try {
    message = parseBoundedJson(std::string(static_cast<const char*>(data), size), kMaxControlMessageBytes,
                               kMaxControlDepth);
  } catch (const SpecError& e) {
    throw WireError(std::string("control message: ") + e.what());
  }
  if (!message.is_object()) throw WireError("control message is not a JSON object");
  return message;
}

std::string toText(const Json& message) { return message.dump(-1, ' ', false, Json::error_handler_t::replace); }

void applyClientSecurity(zmq::socket_t& socket, const ClientSecurity& security) {
  if (!security.curve()) return;
  if (!isZ85Key(security.self.secretKey) || !isZ85Key(security.self.publicKey)) {
    throw Error("a CURVE connection needs this side's key pair (--key, $SKYTRAIN_KEY or secret_key_file)");
  }
  if (!isZ85Key(security.serverKey)) throw Error("the server key \"" + security.serverKey.substr(0, 48) + "\" is not a Z85 key");
  socket.set(zmq::sockopt::curve_serverkey, security.serverKey);
  socket.set(zmq::sockopt::curve_publickey, security.self.publicKey);
  socket.set(zmq::sockopt::curve_secretkey, security.self.secretKey);
}

ControlClient::ControlClient(zmq::context_t& context, std::string endpoint, ClientSecurity security)
    : context_(context), endpoint_(std::move(endpoint)), security_(std::move(security)) {
  connect();
}

ControlClient::~ControlClient() {
  monitor_.reset();
  socket_.reset();
}

void ControlClient::connect() {
  monitor_.reset();
  socket_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  socket_->set(zmq::sockopt::linger, 2000);
  socket_->set(zmq::sockopt::reconnect_ivl, 100);
  socket_->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kControlSocketLimit));
  applyClientSecurity(*socket_, security_);
  monitor_ = std::make_unique<HandshakeMonitor>(context_, *socket_, endpoint_, security_);
  try {
    socket_->connect(endpoint_);
  } catch (const zmq::error_t& e) {
    throw PeerError("cannot connect to \"" + endpoint_ + "\": " + e.what());
  }
}

void ControlClient::post(const Json& message) {
  const std::string body = toText(message);
  if (body.size() > kMaxControlMessageBytes) {
    throw Error("request of " + std::to_string(body.size()) + " bytes exceeds the control message limit of " +
                std::to_string(kMaxControlMessageBytes) + " bytes");
  }
  socket_->send(zmq::buffer(body), zmq::send_flags::none);
}

std::optional<Json> ControlClient::tryReceive() {
  zmq::message_t frame;
  if (!socket_->recv(frame, zmq::recv_flags::dontwait)) return std::nullopt;
  return parseControlMessage(frame.data(), frame.size());
}

Json ControlClient::request(Json message, std::chrono::milliseconds timeout) {
  const uint64_t id = nextId_++;
  message["id"] = id;
  post(message);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (auto failure = monitor_->failure()) {
      socket_->set(zmq::sockopt::linger, 0);
      connect();
      throw PeerError(*failure);
    }
    zmq::pollitem_t items[] = {{static_cast<void*>(*socket_), 0, ZMQ_POLLIN, 0},
                               {static_cast<void*>(monitor_->events()), 0, ZMQ_POLLIN, 0}};
    bool readable = false;
    if (left.count() > 0) {
      try {
        zmq::poll(items, 2, std::min(left, std::chrono::milliseconds(100)));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
      readable = items[0].revents & ZMQ_POLLIN;
    }
    if (!readable) {
      if (std::chrono::steady_clock::now() < deadline) continue;
      socket_->set(zmq::sockopt::linger, 0);
      connect();
      throw PeerError("no reply from " + endpoint_ + " to \"" + message.value("type", "?") + "\" within " +
                      std::to_string(timeout.count()) + " ms (is the daemon running and reachable?)");
    }
    zmq::message_t frame;
    if (!socket_->recv(frame, zmq::recv_flags::dontwait)) continue;
    Json reply = parseControlMessage(frame.data(), frame.size());
    if (reply.value("id", uint64_t{0}) != id) continue;  // a late reply to an earlier request
    if (!reply.value("ok", false)) {
      const std::string path = reply.value("path", "");
      const std::string error = reply.value("error", "request failed");
      if (!path.empty()) throw SpecError(path, error.rfind(path + ": ", 0) == 0 ? error.substr(path.size() + 2) : error);
      throw Error(error);
    }
    return reply;
  }
}

}  // namespace skytrain::protocol
