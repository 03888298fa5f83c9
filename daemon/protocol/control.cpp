#include "daemon/protocol/control.h"

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
    throw WireError("control message of " + std::to_string(size) + " bytes exceeds the limit");
  }
  const auto* text = static_cast<const char*>(data);
  Json message = Json::parse(text, text + size, nullptr, /*allow_exceptions=*/false);
  if (message.is_discarded() || !message.is_object()) throw WireError("control message is not a JSON object");
  return message;
}

ControlClient::ControlClient(zmq::context_t& context, std::string endpoint)
    : context_(context), endpoint_(std::move(endpoint)) {
  connect();
}

void ControlClient::connect() {
  socket_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  socket_->set(zmq::sockopt::linger, 2000);
  socket_->set(zmq::sockopt::reconnect_ivl, 100);
  socket_->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxControlMessageBytes));
  try {
    socket_->connect(endpoint_);
  } catch (const zmq::error_t& e) {
    throw PeerError("cannot connect to \"" + endpoint_ + "\": " + e.what());
  }
}

void ControlClient::post(const Json& message) {
  const std::string body = message.dump();
  socket_->send(zmq::buffer(body), zmq::send_flags::none);
}

Json ControlClient::request(Json message, std::chrono::milliseconds timeout) {
  const uint64_t id = nextId_++;
  message["id"] = id;
  post(message);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !waitReadable(*socket_, left)) {
      if (std::chrono::steady_clock::now() < deadline) continue;  // interrupted by a signal
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
