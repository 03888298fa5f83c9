// Admission counts what will be in memory, not what files weigh, with real daemons over
// loopback: a TorchScript zip bomb is counted at its inflated size and refused before it is
// loaded; an init_from file that is no safetensors file (a huge sparse one) is refused from
// its header, never read; and one daemon's budget covers every stage it hosts, so a second
// job cannot take a second budget.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "daemon/daemon.h"
#include "daemon/protocol/control.h"
#include "daemon_fixture.h"
#include "stages/tokens/token_files.h"
#include "stages/tokens/token_manifest.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

// The job's error; the job must have failed.
std::string failure(zmq::context_t& context, const TestDaemon& coordinator, const Json& spec) {
  const Json status = runJob(context, coordinator.control(), spec);
  INFO(status.dump());
  REQUIRE(status["state"] == "failed");
  return status["error"];
}

// A scratch folder under the corpus's, inside the daemons' data roots.
std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::path(SKYTRAIN_TEST_CORPUS).parent_path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("a TorchScript zip bomb is counted at its inflated size and refused before it is loaded",
          "[integration][security][admission]") {
  const auto dir = scratch("admission_test_bomb");
  const auto bomb = dir / "bomb.pt";
  // 256 MiB of zeros deflated into a few hundred KB, in a TorchScript archive's layout.
  const std::string make = "python3 -c \"import zipfile; z = zipfile.ZipFile('" + bomb.string() +
                           "', 'w', zipfile.ZIP_DEFLATED); w = z.open('bomb/data/0', 'w');\n"
                           "for _ in range(256): w.write(bytes(1 << 20))\nw.close(); z.close()\"";
  REQUIRE(std::system(make.c_str()) == 0);
  REQUIRE(std::filesystem::file_size(bomb) < (2u << 20));
  TestDaemonOptions options;
  options.memoryBudgetMb = 700;
  TestDaemon a("bomba", options), b("bombb", options);
  zmq::context_t context;
  Json spec = twoStageSpec(a.control(), b.control(), 2);
  spec["model"] = {{"kind", "torchscript"}, {"vocab_size", 256}, {"seq_len", 8}};
  spec["stages"] = {{{"daemon", a.control()}, {"module", bomb.string()}},
                    {{"daemon", b.control()}, {"module", bomb.string()}, {"input_shape", {8, 16}}}};
  const std::string error = failure(context, a, spec);
  CHECK_THAT(error, Catch::Contains("weights 256.0 MB"));
  CHECK_THAT(error, Catch::Contains("over this daemon's memory budget"));
  // A file that is no ZIP archive is refused by its (absent) directory, not loaded.
  std::ofstream(dir / "not-a-module.pt") << "just text";
  spec["stages"][0]["module"] = spec["stages"][1]["module"] = (dir / "not-a-module.pt").string();
  CHECK_THAT(failure(context, a, spec), Catch::Contains("ZIP archive " + (dir / "not-a-module.pt").string() + ": "));
  for (const auto* d : {&a, &b}) CHECK(ping(context, *d, {})["ok"] == true);
  std::filesystem::remove_all(dir);
}

TEST_CASE("an init_from file is judged by its header: a 7 GiB sparse file is refused unread",
          "[integration][security][admission]") {
  const auto dir = scratch("admission_test_sparse");
  const auto sparse = dir / "weights.safetensors";
  { std::ofstream(sparse) << ""; }
  std::filesystem::resize_file(sparse, uint64_t{7} << 30);  // zeros, no blocks on disk
  TestDaemon a("sparsea"), b("sparseb");
  zmq::context_t context;
  Json spec = twoStageSpec(a.control(), b.control(), 2);
  spec["stages"][1]["init_from"] = {sparse.string()};
  CHECK_THAT(failure(context, a, spec), Catch::Contains("safetensors file " + sparse.string()));
  CHECK(ping(context, b, {})["ok"] == true);
  std::filesystem::remove_all(dir);
}

TEST_CASE("one memory budget covers every stage a daemon hosts: a second job is refused with the first's share",
          "[integration][admission]") {
  TestDaemonOptions options;
  options.memoryBudgetMb = 350;  // one test stage: 256 MB runtime + 60 MB data (the corpus, tokenised)
  TestDaemon a("budgeta", options), b("budgetb", options);
  zmq::context_t context;
  protocol::ControlClient client(context, a.control(), {});
  const std::string first =
      client.request({{"type", "submit"}, {"spec", twoStageSpec(a.control(), b.control(), 100000).dump()}}, seconds(5))["job"];
  for (int i = 0; i < 400 && ping(context, b, {})["hosted_stages"] != 1; ++i) std::this_thread::sleep_for(milliseconds(50));
  REQUIRE(ping(context, b, {})["hosted_stages"] == 1);
  const std::string error = failure(context, a, twoStageSpec(a.control(), b.control(), 2));
  CHECK_THAT(error, Catch::Contains("admitted for the 1 other stage(s) hosted here"));
  client.request({{"type", "cancel"}, {"job", first}}, seconds(5));
  CHECK(waitForEnd(client, first)["state"] == "cancelled");
  // With the first job gone, the same job fits.
  for (int i = 0; i < 200 && ping(context, b, {})["hosted_stages"] != 0; ++i) std::this_thread::sleep_for(milliseconds(50));
  CHECK(runJob(context, a.control(), twoStageSpec(a.control(), b.control(), 2))["state"] == "succeeded");
}

TEST_CASE("a token past the model's vocabulary fails the job at once, not after every restart", "[integration]") {
  TestDaemon a("vocaba"), b("vocabb");
  zmq::context_t context;
  const auto dir = scratch("vocab-tokens");
  {
    stages::TokenShardWriter w((dir / "train-00000.bin").string(), stages::TokenDtype::U16, true);
    std::vector<int32_t> ids(4000, 65);
    for (int at : {500, 1500, 2000, 2500, 3500}) ids[at] = 60000;  // a model of 256 tokens cannot embed it
    w.append(ids);
    w.finish();
  }
  stages::TokenManifest manifest;
  manifest.train = {"train-00000.bin"};
  std::ofstream(dir / stages::kTokenManifestName) << stages::tokenManifestJson(manifest);
  Json spec = twoStageSpec(a.control(), b.control(), 200);
  spec["data"] = {{"format", "tokens"}, {"files", {dir.string()}}};
  const Json status = runJob(context, a.control(), spec);
  INFO(status.dump());
  REQUIRE(status["state"] == "failed");
  CHECK_THAT(status["error"].get<std::string>(), Catch::Contains("bad data: token id 60000"));
  CHECK(status["restarts"] == 0);  // a restart would read the same token again
  std::filesystem::remove_all(dir);
}
