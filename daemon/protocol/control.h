// Control messages between the CLI and daemons and between daemons: one JSON document per
// ZeroMQ message, requests carry "type" and "id", replies echo "id" and carry "ok".
#pragma once

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "daemon/protocol/keys.h"

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
inline constexpr const char* kStageCommit = "stage.commit";  // a healing job's step may be applied

// A request over kMaxControlMessageBytes gets an error reply naming the limit; one over
// kControlSocketLimit is dropped by ZeroMQ with its connection.
constexpr size_t kMaxControlMessageBytes = 4 << 20;
constexpr size_t kControlSocketLimit = 4 * kMaxControlMessageBytes;
constexpr int kMaxControlDepth = 32;

// True when the socket has a message within timeout; a signal (EINTR) counts as "not yet".
bool waitReadable(zmq::socket_t& socket, std::chrono::milliseconds timeout);

// Builds {"ok": false, "error": message} (plus "path" when given).
Json errorReply(const std::string& message, const std::string& path = "");

// Parses a control message body; throws skytrain::WireError if it is not a JSON object
// within the size and depth caps.
Json parseControlMessage(const void* data, size_t size);

// Serialises a message; invalid UTF-8 in strings is replaced, never thrown.
std::string toText(const Json& message);

// How a client socket authenticates to its server: CURVE with `self` to a server whose
// public key is `serverKey`, or plaintext when serverKey is empty (insecure daemons, which
// bind loopback only).
struct ClientSecurity {
  KeyPair self;
  std::string serverKey;
  bool curve() const { return !serverKey.empty(); }
};

// Sets the CURVE client options; throws skytrain::Error when CURVE is asked without keys.
void applyClientSecurity(zmq::socket_t& socket, const ClientSecurity& security);

// A DEALER connected to one daemon's control endpoint. Owned by one thread.
class HandshakeMonitor;

class ControlClient {
 public:
  ControlClient(zmq::context_t& context, std::string endpoint, ClientSecurity security);
  ~ControlClient();

  const std::string& endpoint() const { return endpoint_; }

  // Sends a request and waits for its reply. Throws skytrain::PeerError when no reply
  // comes within timeout (the socket is then rebuilt, dropping the stale request) or as
  // soon as the CURVE handshake fails (refused key, wrong daemon key), and skytrain::Error
  // carrying the daemon's message when the reply has ok == false, or when the request is
  // over kMaxControlMessageBytes.
  Json request(Json message, std::chrono::milliseconds timeout);

  // Sends a one-way message (no reply expected). Queued if the peer is not connected yet.
  void post(const Json& message);
  // A reply that has arrived (to a posted message carrying an "id"), without waiting.
  std::optional<Json> tryReceive();

 private:
  void connect();

  zmq::context_t& context_;
  std::string endpoint_;
  ClientSecurity security_;
  std::unique_ptr<zmq::socket_t> socket_;  // owned by the thread that owns this client
  std::unique_ptr<HandshakeMonitor> monitor_;  // watches socket_; same thread
  uint64_t nextId_ = 1;
};

}  // namespace skytrain::protocol
