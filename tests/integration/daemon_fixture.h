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

#include "compression/wire/tensor_frame.h"
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

// The final weights of a two-stage job, stage 0's on a and stage 1's on b, by global name.
std::map<std::string, at::Tensor> pipelineWeights(const TestDaemon& a, const TestDaemon& b, const std::string& job);

// A two-stage GPT small enough for a test, on the test corpus: batch 4, m = 2, 1F1B, one
// block a stage on daemons a and b.
nlohmann::json twoStageSpec(const std::string& a, const std::string& b, int steps);

// The daemon's ping reply (its endpoints; for an admin, its refusal counters).
nlohmann::json ping(zmq::context_t& context, const TestDaemon& d, const protocol::ClientSecurity& as);

// Polls the job's status until it is neither preparing nor running (two minutes at most).
nlohmann::json waitForEnd(protocol::ControlClient& client, const std::string& job);

// Every stage's final weights of jobA (stage i on hostsA[i]) equal jobB's, bit for bit.
void requireSameWeights(const std::string& jobA, const std::string& jobB, int stages,
                        const std::vector<const TestDaemon*>& hostsA, const std::vector<const TestDaemon*>& hostsB);

// A hostile peer's tools: a raw multi-part message over its own CURVE connection, and a
// data frame of the job's key with any header and tensor (none codec).
void sendRaw(zmq::context_t& context, const std::string& endpoint, const protocol::ClientSecurity& as,
             const std::vector<std::string>& parts);
compression::TensorFrame forgedFrame(uint64_t job, uint64_t step, uint32_t microBatch, uint16_t stage,
                                     compression::FrameDirection direction, const at::Tensor& tensor);
// The same with a tensor of 1e6 everywhere.
compression::TensorFrame forgedFrame(uint64_t job, uint64_t step, uint32_t microBatch, uint16_t stage,
                                     compression::FrameDirection direction, std::vector<int64_t> shape);
void sendFrame(zmq::context_t& context, const std::string& dataEndpoint, const protocol::ClientSecurity& as,
               const compression::TensorFrame& frame);

}  // namespace skytrain::testing
