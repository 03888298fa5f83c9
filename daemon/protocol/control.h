// Control messages between the CLI and daemons and between daemons: one JSON document per
// ZeroMQ message, requests carry "type" and "id", replies echo "id" and carry "ok".
#pragma once

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace skytrain::protocol {

using Json = nlohmann::json;

// Request types.
inline constexpr const char* kPing = "ping";
inline constexpr const char* kSubmit = "submit";
inline constexpr const char* kStatus = "status";
inline constexpr const char* kList = "list";
inline constexpr const char* kCancel = "cancel";
inline constexpr const char* kStagePrepare = "stage.prepare";
inline constexpr const char* kStageStart = "stage.start";
inline constexpr const char* kStageAbort = "stage.abort";
inline constexpr const char* kStagePlan = "stage.plan";        // m, schedule, warm-ups from the planner
inline constexpr const char* kStageProfile = "stage.profile";  // profile again before at_step (-1: cancel)
inline constexpr const char* kStageReport = "stage.report";  // one-way, no reply

constexpr size_t kMaxControlMessageBytes = 4 << 20;

// True when the socket has a message within timeout; a signal (EINTR) counts as "not yet".
bool waitReadable(zmq::socket_t& socket, std::chrono::milliseconds timeout);

// Builds {"ok": false, "error": message} (plus "path" when given).
Json errorReply(const std::string& message, const std::string& path = "");

// Parses a control message body; throws skytrain::WireError if it is not a JSON object
// within the size cap.
Json parseControlMessage(const void* data, size_t size);

// A DEALER connected to one daemon's control endpoint. Owned by one thread.
class ControlClient {
 public:
  ControlClient(zmq::context_t& context, std::string endpoint);

  const std::string& endpoint() const { return endpoint_; }

  // Sends a request and waits for its reply. Throws skytrain::PeerError when no reply
  // comes within timeout (the socket is then rebuilt, dropping the stale request) and
  // skytrain::Error carrying the daemon's message when the reply has ok == false.
  Json request(Json message, std::chrono::milliseconds timeout);

  // Sends a one-way message (no reply expected). Queued if the peer is not connected yet.
  void post(const Json& message);

 private:
  void connect();

  zmq::context_t& context_;
  std::string endpoint_;
  std::unique_ptr<zmq::socket_t> socket_;  // owned by the thread that owns this client
  uint64_t nextId_ = 1;
};

}  // namespace skytrain::protocol
