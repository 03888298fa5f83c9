// ZeRO-1 (optimizer.zero 1): two copies of each stage, each keeping AdamW state for its own
// half of the parameters and broadcasting its updated half over c10d Gloo, train to the
// very same losses and weights as the unsharded copies, and each copy's checkpoint holds
// AdamW state for its own shard only — the two shards disjoint, together every parameter.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <fstream>
#include <iterator>
#include <set>

#include "daemon/stage/state/checkpoint.h"
#include "daemon_fixture.h"
#include "stages/weights/safetensors.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;

namespace {

constexpr int kSteps = 4;

// Stage 0's copies on daemons a and c, stage 1's both on b (two copies of one daemon).
Json replicatedSpec(const TestDaemon& a, const TestDaemon& b, const TestDaemon& c, int zero) {
  Json stages = {{{"daemon", a.control()}, {"layers", {0, 2}}, {"replicas", {{{"daemon", c.control()}}}}},
                 {{"daemon", b.control()}, {"layers", {2, 4}}, {"replicas", {{{"daemon", b.control()}}}}}};
  return {{"name", "zero"},
          {"seed", 13},
          {"steps", kSteps},
          {"batch_size", 8},
          {"micro_batches", 2},
          {"schedule", "1f1b"},
          {"model", {{"d_model", 32}, {"heads", 4}, {"layers", 4}, {"d_ff", 64}, {"seq_len", 16}}},
          {"data", {{"files", {SKYTRAIN_TEST_CORPUS}}}},
          {"optimizer", {{"lr", 1e-3}, {"weight_decay", 0.1}, {"zero", zero}}},
          {"eval", {{"samples", 8}}},
          {"checkpoint", {{"interval", 2}}},
          {"stages", stages}};
}

// The names of the parameters whose AdamW state a copy's last checkpoint holds, and of all
// its parameters.
std::pair<std::set<std::string>, std::set<std::string>> checkpointState(const std::filesystem::path& jobDir, int stage) {
  const std::string path = daemon::checkpointTensorsPath(jobDir.string(), kSteps - 1, stage);
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::set<std::string> adam, params;
  for (const auto& [name, tensor] : stages::decodeSafetensors(bytes, path).tensors) {
    const std::string suffix = "/exp_avg";
    if (name.rfind("adamw/", 0) == 0 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      adam.insert(name.substr(6, name.size() - 6 - suffix.size()));
    }
    if (name.rfind("param/", 0) == 0) params.insert(name.substr(6));
  }
  return {adam, params};
}

}  // namespace

TEST_CASE("ZeRO-1: sharded AdamW state over two copies trains to the unsharded update's bits", "[integration]") {
  TestDaemon a("a"), b("b"), c("c");
  zmq::context_t context;
  const Json plain = runJob(context, a.control(), replicatedSpec(a, b, c, 0));
  REQUIRE(plain["state"] == "succeeded");
  const Json sharded = runJob(context, a.control(), replicatedSpec(a, b, c, 1));
  REQUIRE(sharded["state"] == "succeeded");
  for (int step = 0; step < kSteps; ++step) {
    CHECK(sharded["steps"][step]["loss"].get<double>() == plain["steps"][step]["loss"].get<double>());
  }
  const std::string plainJob = plain["id"], shardedJob = sharded["id"];
  for (int stage = 0; stage < 2; ++stage) {
    INFO("stage " << stage);
    const auto& first = stage == 0 ? a : b;
    const auto& second = stage == 0 ? c : b;
    const std::string file = "stage-" + std::to_string(stage) + ".pt";
    const auto expected = loadStageWeights(first.dir() / "jobs" / plainJob / file);
    // Both copies end with the unsharded run's weights, to the bit.
    for (const auto& copy : {first.dir() / "jobs" / shardedJob, second.dir() / "jobs" / shardedJob / "replica-1"}) {
      const auto weights = loadStageWeights(copy / file);
      REQUIRE(weights.size() == expected.size());
      for (const auto& [name, tensor] : expected) {
        INFO(name);
        CHECK(torch::equal(weights.at(name), tensor));
      }
    }
    // Each copy's checkpoint holds its shard's AdamW state: disjoint halves of the whole.
    const auto [adam0, params] = checkpointState(first.dir() / "jobs" / shardedJob, stage);
    const auto [adam1, params1] = checkpointState(second.dir() / "jobs" / shardedJob / "replica-1", stage);
    const auto [unsharded, unused] = checkpointState(first.dir() / "jobs" / plainJob, stage);
    CHECK_FALSE(adam0.empty());
    CHECK_FALSE(adam1.empty());
    for (const auto& name : adam0) CHECK(adam1.count(name) == 0);
    std::set<std::string> both = adam0;
    both.insert(adam1.begin(), adam1.end());
    CHECK(both == unsharded);
    CHECK(adam0.size() < unsharded.size());
  }
}
