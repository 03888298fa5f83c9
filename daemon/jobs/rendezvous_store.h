// RendezvousStore: the keys through which a job's replicated stage copies meet (c10d's
// store, daemon/net/replica_group.h), per stage, kept at the coordinator for one attempt.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "daemon/protocol/messages.h"

namespace skytrain::daemon {

class RendezvousStore {
 public:
  // The reply to a store request of job `job` whose sender and attempt the caller has
  // checked. Throws skytrain::WireError on a missing key, a key that holds no counter, or
  // a stage's store full (protocol::kMaxStoreKeys).
  nlohmann::json answer(const protocol::StoreRequest& request, const std::string& job);
  // Forgets every key: the copies of a new attempt meet afresh.
  void clear() { keys_.clear(); }

 private:
  std::map<int, std::map<std::string, std::string>> keys_;  // stage -> key -> value
};

}  // namespace skytrain::daemon
