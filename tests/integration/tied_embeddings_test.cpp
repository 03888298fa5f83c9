// Tied embeddings cut across daemons (stages/models/model_source.h, ModelSource::tied): the
// first stage's embedding and the last stage's head are two copies whose gradients are
// summed over the links every step, so they train like one process in which the head is
// the embedding itself.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "client/commands.h"
#include "client/export/export.h"
#include "daemon_fixture.h"
#include "reference_trainer.h"
#include "stages/weights/safetensors.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;

namespace {

// As equivalence_test: micro-batches against the whole batch differ by float reassociation.
constexpr double kLossTolerance = 1e-4;
constexpr double kParameterTolerance = 1e-4;
constexpr int kSteps = 4;

// A 4-block model of `kind` with tied embeddings, blocks [0, 2) on daemon a and [2, 4) on b.
Json tiedSpec(const std::string& kind, const std::string& a, const std::string& b, const Json& optimizer) {
  Json spec = {{"name", "tied"},
               {"seed", 11},
               {"steps", kSteps},
               {"batch_size", 8},
               {"micro_batches", 2},
               {"schedule", "1f1b"},
               {"data", {{"files", {SKYTRAIN_TEST_CORPUS}}}},
               {"optimizer", optimizer},
               {"eval", {{"samples", 8}}},
               {"stages", {{{"daemon", a}, {"layers", {0, 2}}}, {{"daemon", b}, {"layers", {2, 4}}}}}};
  spec["model"] = {{"kind", kind}, {"d_model", 32}, {"heads", 4}, {"layers", 4}, {"d_ff", 64}, {"seq_len", 16},
                   {"tie_embeddings", true}};
  if (kind == "llama") spec["model"]["kv_heads"] = 2;
  return spec;
}

}  // namespace

TEST_CASE("llama and gpt2 with tied embeddings cut across daemons train like one process that ties them",
          "[integration]") {
  TestDaemon a("ta"), b("tb"), c("tc");
  zmq::context_t context;
  // The clip binds, so the global norm must count the tied matrix once, as one process does.
  const Json optimizer = {{"lr", 2e-3}, {"clip_norm", 0.5}};
  const auto [kind, stages] = GENERATE(std::make_pair("llama", 2), std::make_pair("llama", 3), std::make_pair("gpt2", 3));
  CAPTURE(kind, stages);
  Json spec = tiedSpec(kind, a.control(), b.control(), optimizer);
  if (stages == 3) {
    spec["stages"] = {{{"daemon", a.control()}, {"layers", {0, 1}}},
                      {{"daemon", b.control()}, {"layers", {1, 3}}},
                      {{"daemon", c.control()}, {"layers", {3, 4}}}};
  }
  const Trained reference = trainReference(spec);
  REQUIRE(reference.clippedSteps == kSteps);
  REQUIRE(reference.parameters.count("head.weight") == 0);  // one process: the head is the embedding
  const Json status = runJob(context, a.control(), spec);
  REQUIRE(status["state"] == "succeeded");
  for (int step = 0; step < kSteps; ++step) {
    CHECK(status["steps"][step]["loss"].get<double>() == Approx(reference.losses[step]).margin(kLossTolerance));
  }
  // The planner priced the exchange: the first holder's matrix down the chain and back.
  CHECK(status["plans"].back()["tied_s"].get<double>() > 0);
  const std::string job = status["id"];
  std::map<std::string, at::Tensor> parameters;
  TestDaemon* hosts[] = {&a, &b, &c};
  for (int i = 0; i < stages; ++i) {
    parameters.merge(loadStageWeights(hosts[i]->dir() / "jobs" / job / ("stage-" + std::to_string(i) + ".pt")));
  }
  // The two copies stayed bit-identical, and both equal the one process's single matrix.
  REQUIRE(parameters.count("head.weight"));
  CHECK(torch::equal(parameters.at("head.weight"), parameters.at("tok_emb.weight")));
  double worst = 0;
  for (const auto& [name, expected] : reference.parameters) {
    INFO(name);
    REQUIRE(parameters.count(name));
    worst = std::max(worst, (parameters.at(name) - expected).abs().max().item<double>());
  }
  CHECK(worst <= kParameterTolerance);
  WARN(kind << " tied, " << stages << " stages: max |parameter diff| " << worst);

  // `skytrain export` writes the matrix once, under the embedding's name.
  client::ClientOptions options;
  options.daemon = a.control();
  const std::string out = (a.dir() / "tied.safetensors").string();
  REQUIRE(client::exportWeights(options, job, out, client::ExportOptions{}) == 0);
  std::ifstream in(out, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::map<std::string, at::Tensor> exported;
  for (const auto& [name, tensor] : stages::decodeSafetensors(bytes, out).tensors) exported[name] = tensor;
  CHECK(exported.count("head.weight") == 0);
  REQUIRE(exported.count("tok_emb.weight"));
  CHECK(torch::equal(exported.at("tok_emb.weight"), parameters.at("tok_emb.weight")));
  CHECK(exported.size() + 1 == parameters.size());
}

TEST_CASE("on bf16 links the tied gradient crosses in bf16 too, and the two copies stay bit-identical",
          "[integration]") {
  TestDaemon a("ta"), b("tb");
  zmq::context_t context;
  Json spec = tiedSpec("llama", a.control(), b.control(), {{"lr", 2e-3}});
  const Trained reference = trainReference(spec);
  const Json plain = runJob(context, a.control(), spec);
  spec["compression"] = {{"forward", "bf16"}, {"backward", "bf16"}};
  const Json rounded = runJob(context, a.control(), spec);
  REQUIRE(plain["state"] == "succeeded");
  REQUIRE(rounded["state"] == "succeeded");
  // Everything that crosses, the 32 KB tied gradient each way included, takes half the bytes.
  // Had the tied gradient stayed fp32, this model would send 0.75 of the plain run's.
  double plainBytes = 0, roundedBytes = 0;
  for (int step = 0; step < kSteps; ++step) {
    plainBytes += plain["steps"][step]["bytes_sent"].get<double>();
    roundedBytes += rounded["steps"][step]["bytes_sent"].get<double>();
  }
  CHECK(roundedBytes / plainBytes < 0.55);
  std::map<std::string, at::Tensor> parameters;
  parameters.merge(loadStageWeights(a.dir() / "jobs" / rounded["id"].get<std::string>() / "stage-0.pt"));
  parameters.merge(loadStageWeights(b.dir() / "jobs" / rounded["id"].get<std::string>() / "stage-1.pt"));
  CHECK(torch::equal(parameters.at("head.weight"), parameters.at("tok_emb.weight")));
  // bf16 on the links moves the run a little from the one process, not far.
  for (int step = 0; step < kSteps; ++step) {
    CHECK(rounded["steps"][step]["loss"].get<double>() == Approx(reference.losses[step]).margin(0.02));
  }
  WARN("tied gradient in bf16: " << roundedBytes / plainBytes << " of the plain run's bytes");
}
