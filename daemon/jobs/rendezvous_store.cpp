#include "daemon/jobs/rendezvous_store.h"

#include <cstdint>
#include <cstdlib>

#include "daemon/protocol/base64.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

nlohmann::json RendezvousStore::answer(const protocol::StoreRequest& request, const std::string& job) {
  auto& keys = keys_[request.stage];
  const std::string& key = request.keys.empty() ? std::string() : request.keys.front();
  if (request.op == "set" || request.op == "add") {
    if (!keys.count(key) && keys.size() >= protocol::kMaxStoreKeys) {
      throw WireError("the rendezvous store of job " + job + " stage " + std::to_string(request.stage) + " is full (" +
                      std::to_string(protocol::kMaxStoreKeys) + " keys)");
    }
  }
  if (request.op == "set") {
    keys[key] = request.value;
    return {{"ok", true}};
  }
  if (request.op == "get") {
    const auto it = keys.find(key);
    if (it == keys.end()) throw WireError("the rendezvous store has no key \"" + key.substr(0, 64) + "\"");
    return {{"ok", true}, {"value", protocol::base64Encode(it->second)}};
  }
  if (request.op == "add") {
    // c10d keeps counters as decimal text.
    int64_t value = 0;
    if (auto it = keys.find(key); it != keys.end()) {
      const std::string& text = it->second;
      if (text.empty() || text.size() > 20 || text.find_first_not_of("-0123456789") != std::string::npos) {
        throw WireError("the rendezvous key \"" + key.substr(0, 64) + "\" does not hold a counter");
      }
      value = std::strtoll(text.c_str(), nullptr, 10);
    }
    value += request.delta;
    keys[key] = std::to_string(value);
    return {{"ok", true}, {"value", value}};
  }
  if (request.op == "check") {
    bool present = true;
    for (const auto& k : request.keys) present = present && keys.count(k);
    return {{"ok", true}, {"present", present}};
  }
  if (request.op == "delete") return {{"ok", true}, {"deleted", keys.erase(key) > 0}};
  return {{"ok", true}, {"count", keys.size()}};  // "count"
}

}  // namespace skytrain::daemon
