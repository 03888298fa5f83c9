// Test helpers: skytraind instances on ephemeral loopback ports, run in-process on their
// own threads, and a client that submits a job and waits for its end.
#pragma once

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <ATen/core/Tensor.h>

namespace skytrain::daemon {
class Daemon;
}

namespace skytrain::testing {

class TestDaemon {
 public:
  explicit TestDaemon(const std::string& name);
  ~TestDaemon();
  std::string control() const;
  std::filesystem::path dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<daemon::Daemon> daemon_;
  std::thread thread_;
};

// Submits spec to the coordinator and polls until the job ends; returns its status.
nlohmann::json runJob(zmq::context_t& context, const std::string& coordinator, const nlohmann::json& spec);

// A stage's saved weights (<state_dir>/jobs/<job>/stage-<i>.pt).
std::map<std::string, at::Tensor> loadStageWeights(const std::filesystem::path& file);

}  // namespace skytrain::testing
