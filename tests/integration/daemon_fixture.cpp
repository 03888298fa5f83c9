#include "daemon_fixture.h"

#include <catch2/catch.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>

#include "daemon/daemon.h"
#include "daemon/protocol/control.h"

namespace skytrain::testing {

TestDaemon::TestDaemon(const std::string& name) {
  dir_ = std::filesystem::temp_directory_path() / ("skytrain_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir_);
  daemon::DaemonConfig config;
  config.controlEndpoint = "tcp://127.0.0.1:*";
  config.dataEndpoint = "tcp://127.0.0.1:*";
  config.stateDir = dir_.string();
  config.insecure = true;
  daemon_ = std::make_unique<daemon::Daemon>(config);
  thread_ = std::thread([this] { daemon_->run(); });
}

TestDaemon::~TestDaemon() {
  daemon_->stop();
  thread_.join();
  daemon_.reset();
  std::filesystem::remove_all(dir_);
}

std::string TestDaemon::control() const { return daemon_->controlEndpoint(); }

nlohmann::json runJob(zmq::context_t& context, const std::string& coordinator, const nlohmann::json& spec) {
  protocol::ControlClient client(context, coordinator);
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

}  // namespace skytrain::testing
