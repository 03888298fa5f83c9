// Test helpers: skytraind instances on ephemeral loopback ports, run in-process on their
// own threads — insecure, or with CURVE keys from a TestKeys keyring — and a client that
// submits a job and waits for its end.
#pragma once

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

#include "daemon/protocol/control.h"
#include "daemon/protocol/keys.h"

namespace skytrain::daemon {
class Daemon;
}

namespace skytrain::testing {

// Key pairs written to a scratch folder, an authorized_keys file listing them with their
// roles, and a known_daemons file.
class TestKeys {
 public:
  TestKeys();
  ~TestKeys();
  // Makes and writes a key pair; `authorized` lists it in authorized_keys.
  protocol::KeyPair add(const std::string& name, protocol::Role role, bool authorized = true);
  const protocol::KeyPair& get(const std::string& name) const { return keys_.at(name); }
  std::string secretFile(const std::string& name) const;
  std::string authorizedKeys() const { return (dir_ / "authorized_keys").string(); }
  std::string knownDaemons() const { return (dir_ / "known_daemons").string(); }
  void know(const std::string& endpoint, const std::string& publicKey);
  // A client of `name` to a daemon known by `serverKey`.
  protocol::ClientSecurity as(const std::string& name, const std::string& serverKey) const;

 private:
  std::filesystem::path dir_;
  std::map<std::string, protocol::KeyPair> keys_;
};

struct TestDaemonOptions {
  TestKeys* keys = nullptr;  // null: insecure (loopback, plaintext)
  std::string keyName;       // this daemon's key in `keys` (added as a daemon if missing)
  std::vector<std::string> dataRoots = {"/"};
  double prepareTimeoutS = 60;
  int64_t memoryBudgetMb = 0;
  std::string privateAddress = "127.0.0.1";  // for replicated stages' Gloo connections
};

class TestDaemon {
 public:
  explicit TestDaemon(const std::string& name, TestDaemonOptions options = {});
  ~TestDaemon();
  std::string control() const;
  std::string publicKey() const { return publicKey_; }
  std::filesystem::path dir() const { return dir_; }
  daemon::Daemon& daemon() { return *daemon_; }

 private:
  std::filesystem::path dir_;
  std::string publicKey_;
  std::unique_ptr<daemon::Daemon> daemon_;
  std::thread thread_;
};

// Submits spec to the coordinator and polls until the job ends; returns its status.
nlohmann::json runJob(zmq::context_t& context, const std::string& coordinator, const nlohmann::json& spec,
                      const protocol::ClientSecurity& security = {});

// A stage's saved weights (<state_dir>/jobs/<job>/stage-<i>.pt).
std::map<std::string, at::Tensor> loadStageWeights(const std::filesystem::path& file);

}  // namespace skytrain::testing
