#include "daemon/net/access.h"

#include <spdlog/spdlog.h>

#include "scheduler/error.h"

namespace skytrain::daemon {

std::string Caller::describe() const {
  if (insecure) return "an insecure peer";
  return "'" + name + "' (" + protocol::toString(role) + ")";
}

AccessList::AccessList() : insecure_(true) {}

AccessList::AccessList(std::string authorizedKeysPath, protocol::KeyPair self)
    : insecure_(false), path_(std::move(authorizedKeysPath)), self_(std::move(self)) {
  keys_ = protocol::loadAuthorizedKeys(path_);
  spdlog::info("security: {} authorized keys from {}", keys_.size(), path_);
}

std::optional<std::string> AccessList::reload() {
  if (insecure_) return std::nullopt;
  try {
    auto keys = protocol::loadAuthorizedKeys(path_);
    std::lock_guard<std::mutex> lock(mutex_);
    keys_ = std::move(keys);
    spdlog::info("security: reloaded {} authorized keys from {}", keys_.size(), path_);
    return std::nullopt;
  } catch (const std::exception& e) {
    spdlog::error("security: kept the previous authorized keys: {}", e.what());
    return std::string(e.what());
  }
}

std::optional<Caller> AccessList::find(const std::string& userId) const {
  if (insecure_) return Caller{"", "insecure", protocol::Role::Admin, true};
  if (userId == self_.publicKey) return Caller{userId, self_.name, protocol::Role::Daemon, false};
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = keys_.find(userId);
  if (it == keys_.end()) return std::nullopt;
  return Caller{userId, it->second.name, it->second.role, false};
}

}  // namespace skytrain::daemon
