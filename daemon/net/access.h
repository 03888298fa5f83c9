// AccessList: who may talk to this daemon — its authorized keys (reloaded on SIGHUP) plus
// its own key as a daemon — and the Caller each request and frame is attributed to, by the
// ZAP User-Id of its connection (the sender's public key), never by what it says.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "daemon/protocol/keys.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

struct Caller {
  std::string key;   // Z85 public key; "" on an insecure daemon
  std::string name;  // from authorized_keys
  protocol::Role role = protocol::Role::Client;
  bool insecure = false;  // plaintext daemon (loopback only): every caller may do everything

  bool isAdmin() const { return insecure || role == protocol::Role::Admin; }
  bool isDaemon() const { return insecure || role == protocol::Role::Daemon; }
  bool isUser() const { return insecure || role != protocol::Role::Daemon; }
  // "'laptop-1' (client)" for logs and refusals.
  std::string describe() const;
};

// An authenticated caller asked for something it may not do; answered as an error,
// logged with the caller's name and counted.
class Refusal : public Error {
 public:
  using Error::Error;
};

// Refusals, by kind; read by status and metrics.
struct SecurityCounters {
  std::atomic<uint64_t> handshakesRefused{0};  // keys not authorized (ZAP)
  std::atomic<uint64_t> requestsRefused{0};    // authenticated but not allowed
  std::atomic<uint64_t> reportsRefused{0};     // stage reports from the wrong daemon
  std::atomic<uint64_t> framesRefused{0};      // data frames from the wrong daemon or of the wrong shape
};

class AccessList {
 public:
  // Insecure: no keys, every caller allowed everything.
  AccessList();
  // Loads authorizedKeysPath; `self` (this daemon's key) is always a daemon. Throws
  // skytrain::Error naming the file and line of a bad entry.
  AccessList(std::string authorizedKeysPath, protocol::KeyPair self);

  bool insecure() const { return insecure_; }
  const protocol::KeyPair& self() const { return self_; }

  // Reads the file again; on an error keeps the old list and returns the message.
  std::optional<std::string> reload();

  // The caller behind a ZAP User-Id (a public key); nullopt when it is not (or no longer)
  // authorized.
  std::optional<Caller> find(const std::string& userId) const;

 private:
  bool insecure_;
  std::string path_;
  protocol::KeyPair self_;
  mutable std::mutex mutex_;  // guards keys_ (ZAP thread, control thread, data thread)
  protocol::AuthorizedKeys keys_;
};

}  // namespace skytrain::daemon
