#include "daemon_fixture.h"

#include <catch2/catch.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>

#include "compression/codec_registry.h"
#include "daemon/daemon.h"
#include "daemon/protocol/control.h"

namespace skytrain::testing {

TestKeys::TestKeys() {
  static int counter = 0;
  dir_ = std::filesystem::temp_directory_path() /
         ("skytrain_keys_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  std::ofstream(authorizedKeys()).flush();
  std::ofstream(knownDaemons()).flush();
}

TestKeys::~TestKeys() { std::filesystem::remove_all(dir_); }

protocol::KeyPair TestKeys::add(const std::string& name, protocol::Role role, bool authorized) {
  const auto keys = protocol::generateKeyPair(name);
  protocol::writeKeyPair(keys, dir_.string());
  if (authorized) {
    std::ofstream(authorizedKeys(), std::ios::app) << keys.publicKey << " " << protocol::toString(role) << " " << name << "\n";
  }
  keys_[name] = keys;
  return keys;
}

std::string TestKeys::secretFile(const std::string& name) const { return (dir_ / (name + ".key")).string(); }

void TestKeys::know(const std::string& endpoint, const std::string& publicKey) {
  std::ofstream(knownDaemons(), std::ios::app) << endpoint << " " << publicKey << "\n";
}

protocol::ClientSecurity TestKeys::as(const std::string& name, const std::string& serverKey) const {
  return {get(name), serverKey};
}

TestDaemon::TestDaemon(const std::string& name, TestDaemonOptions options) {
  dir_ = std::filesystem::temp_directory_path() / ("skytrain_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir_);
  daemon::DaemonConfig config;
  config.controlEndpoint = "tcp://127.0.0.1:*";
  config.dataEndpoint = "tcp://127.0.0.1:*";
  config.metricsAddress = "127.0.0.1:0";
  config.stateDir = dir_.string();
  config.dataRoots = options.dataRoots;
  config.prepareTimeoutS = options.prepareTimeoutS;
  config.memoryBudgetMb = options.memoryBudgetMb;
  config.privateAddress = options.privateAddress;
  if (options.keys) {
    const std::string keyName = options.keyName.empty() ? name : options.keyName;
    try {
      options.keys->get(keyName);
    } catch (const std::out_of_range&) {
      options.keys->add(keyName, protocol::Role::Daemon);
    }
    config.secretKeyFile = options.keys->secretFile(keyName);
    config.authorizedKeys = options.keys->authorizedKeys();
    config.knownDaemons = options.keys->knownDaemons();
    publicKey_ = options.keys->get(keyName).publicKey;
  } else {
    config.insecure = true;
  }
  daemon_ = std::make_unique<daemon::Daemon>(config);
  if (options.keys) options.keys->know(daemon_->controlEndpoint(), publicKey_);
  thread_ = std::thread([this] { daemon_->run(); });
}

TestDaemon::~TestDaemon() {
  daemon_->stop();
  thread_.join();
  daemon_.reset();
  std::filesystem::remove_all(dir_);
}

std::string TestDaemon::control() const { return daemon_->controlEndpoint(); }

nlohmann::json runJob(zmq::context_t& context, const std::string& coordinator, const nlohmann::json& spec,
                      const protocol::ClientSecurity& security) {
  protocol::ControlClient client(context, coordinator, security);
  const std::string job = client.request({{"type", "submit"}, {"spec", spec.dump()}}, std::chrono::seconds(5))["job"];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (std::chrono::steady_clock::now() < deadline) {
    nlohmann::json status = client.request({{"type", "status"}, {"job", job}}, std::chrono::seconds(5))["job"];
    const std::string state = status["state"];
    if (state != "preparing" && state != "running") return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL("job " << job << " did not finish in time");
  return {};
}

std::map<std::string, at::Tensor> loadStageWeights(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  REQUIRE(in);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, at::Tensor> out;
  for (const auto& entry : torch::pickle_load(bytes).toGenericDict()) {
    out[entry.key().toStringRef()] = entry.value().toTensor();
  }
  return out;
}

std::map<std::string, at::Tensor> pipelineWeights(const TestDaemon& a, const TestDaemon& b, const std::string& job) {
  auto parameters = loadStageWeights(a.dir() / "jobs" / job / "stage-0.pt");
  parameters.merge(loadStageWeights(b.dir() / "jobs" / job / "stage-1.pt"));
  return parameters;
}

nlohmann::json twoStageSpec(const std::string& a, const std::string& b, int steps) {
  return {{"name", "secure"},
          {"seed", 3},
          {"steps", steps},
          {"batch_size", 4},
          {"micro_batches", 2},
          {"schedule", "1f1b"},
          {"model", {{"d_model", 16}, {"heads", 2}, {"layers", 2}, {"d_ff", 32}, {"seq_len", 8}}},
          {"data", {{"files", {SKYTRAIN_TEST_CORPUS}}}},
          {"eval", {{"samples", 4}}},
          {"stages", {{{"daemon", a}, {"layers", {0, 1}}}, {{"daemon", b}, {"layers", {1, 2}}}}}};
}

nlohmann::json ping(zmq::context_t& context, const TestDaemon& d, const protocol::ClientSecurity& as) {
  return protocol::ControlClient(context, d.control(), as).request({{"type", "ping"}}, std::chrono::seconds(5));
}

nlohmann::json waitForEnd(protocol::ControlClient& client, const std::string& job) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    nlohmann::json status = client.request({{"type", "status"}, {"job", job}}, std::chrono::seconds(5))["job"];
    if (status["state"] != "preparing" && status["state"] != "running") return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL("job " << job << " did not end");
  return {};
}

void requireSameWeights(const std::string& jobA, const std::string& jobB, int stages,
                        const std::vector<const TestDaemon*>& hostsA, const std::vector<const TestDaemon*>& hostsB) {
  for (int i = 0; i < stages; ++i) {
    const auto name = "stage-" + std::to_string(i) + ".pt";
    const auto left = loadStageWeights(hostsA[i]->dir() / "jobs" / jobA / name);
    const auto right = loadStageWeights(hostsB[i]->dir() / "jobs" / jobB / name);
    REQUIRE(left.size() == right.size());
    for (const auto& [key, tensor] : left) {
      INFO(key);
      CHECK(torch::equal(tensor, right.at(key)));
    }
  }
}

void sendRaw(zmq::context_t& context, const std::string& endpoint, const protocol::ClientSecurity& as,
             const std::vector<std::string>& parts) {
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  protocol::applyClientSecurity(socket, as);
  socket.set(zmq::sockopt::linger, 500);
  socket.connect(endpoint);
  for (size_t i = 0; i < parts.size(); ++i) {
    socket.send(zmq::buffer(parts[i]), i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

compression::TensorFrame forgedFrame(uint64_t job, uint64_t step, uint32_t microBatch, uint16_t stage,
                                     compression::FrameDirection direction, const at::Tensor& tensor) {
  compression::TensorFrame frame;
  frame.job = job;
  frame.step = step;
  frame.microBatch = microBatch;
  frame.stage = stage;
  frame.direction = direction;
  frame.tensor = compression::builtinCodecs().make("none")->encode(tensor);
  return frame;
}

compression::TensorFrame forgedFrame(uint64_t job, uint64_t step, uint32_t microBatch, uint16_t stage,
                                     compression::FrameDirection direction, std::vector<int64_t> shape) {
  return forgedFrame(job, step, microBatch, stage, direction, torch::full(shape, 1e6));
}

void sendFrame(zmq::context_t& context, const std::string& dataEndpoint, const protocol::ClientSecurity& as,
               const compression::TensorFrame& frame) {
  sendRaw(context, dataEndpoint, as, {compression::encodeFrameHeader(frame), frame.tensor.payload});
}

}  // namespace skytrain::testing
