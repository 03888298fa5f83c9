#include "daemon/net/zap_handler.h"

#include <spdlog/spdlog.h>
#include <zmq_addon.hpp>

#include "daemon/protocol/control.h"
#include "daemon/protocol/printable.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kZapDomain = "skytrain";

std::string z85(const zmq::message_t& binaryKey) {
  if (binaryKey.size() != 32) return "";
  char text[protocol::kZ85KeyLength + 1] = {};
  zmq_z85_encode(text, static_cast<const uint8_t*>(binaryKey.data()), 32);
  return text;
}

}  // namespace

void applyCurveServer(zmq::socket_t& socket, const protocol::KeyPair& self) {
  socket.set(zmq::sockopt::curve_server, true);
  socket.set(zmq::sockopt::curve_secretkey, self.secretKey);
  socket.set(zmq::sockopt::zap_domain, kZapDomain);
}

std::string userIdOf(const zmq::message_t& message) {
  const char* id = zmq_msg_gets(const_cast<zmq_msg_t*>(message.handle()), "User-Id");
  return id ? id : "";
}

ZapHandler::ZapHandler(zmq::context_t& context, const AccessList& access, SecurityCounters& counters)
    : access_(access), counters_(counters), socket_(context, zmq::socket_type::rep) {
  socket_.set(zmq::sockopt::linger, 0);
  try {
    socket_.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    throw Error(std::string("cannot bind the ZAP handler: ") + e.what());
  }
  thread_ = std::thread([this] { run(); });
}

ZapHandler::~ZapHandler() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> ZapHandler::answer(const std::vector<zmq::message_t>& request) {
  // version, request id, domain, address, routing id, mechanism, credentials...
  if (request.size() < 6 || request[0].to_string_view() != "1.0") return {"500", "malformed ZAP request", ""};
  const std::string mechanism = request[5].to_string();
  const std::string address = request[3].to_string();
  if (mechanism != "CURVE" || request.size() != 7) {
    ++counters_.handshakesRefused;
    refusals_.warn("a " + protocol::printable(mechanism, 16) + " connection from " + protocol::printable(address, 64) +
                   " (CURVE required)");
    return {"400", "CURVE required", ""};
  }
  const std::string key = z85(request[6]);
  if (auto caller = access_.find(key)) {
    spdlog::debug("security: admitted {} from {}", caller->describe(), address);
    return {"200", "OK", key};
  }
  ++counters_.handshakesRefused;
  refusals_.warn("key " + key + " from " + protocol::printable(address, 64) + " (not in the authorized keys)");
  return {"400", "key not authorized", ""};
}

void ZapHandler::run() {
  while (!stopping_) {
    if (!protocol::waitReadable(socket_, std::chrono::milliseconds(100))) {
      refusals_.flush();
      continue;
    }
    std::vector<zmq::message_t> request;
    try {
      if (!zmq::recv_multipart(socket_, std::back_inserter(request), zmq::recv_flags::dontwait)) continue;
      const auto reply = answer(request);
      const std::string requestId = request.size() > 1 ? request[1].to_string() : "";
      const std::string frames[] = {"1.0", requestId, reply[0], reply[1], reply[2], ""};
      for (size_t i = 0; i < 6; ++i) {
        socket_.send(zmq::buffer(frames[i]), i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    } catch (const std::exception& e) {
      spdlog::error("security: ZAP handler: {}", e.what());
    }
  }
}

}  // namespace skytrain::daemon
