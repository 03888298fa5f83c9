// Bring-your-own-model (issue: models and topologies): a model written in Python, cut in
// two (and three) by deploy/examples/torchscript/tiny_lm.py and exported as TorchScript,
// trains across daemons exactly like the uncut module trained in one process; malformed,
// wrong-shaped and missing modules are refused with the file and the reason.
#include <catch2/catch.hpp>
#include <torch/script.h>
#include <torch/torch.h>

#include <fstream>
#include <map>

#include "daemon_fixture.h"
#include "scheduler/error.h"
#include "daemon/protocol/spec/job_spec.h"
#include "stages/models/model_source.h"
#include "stages/data/text_data.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;

namespace {

constexpr int kSteps = 4;
constexpr int kSeqLen = 16;
constexpr int kBatch = 8;
constexpr double kLossTolerance = 1e-4;
constexpr double kParameterTolerance = 1e-4;

// The modules the CTest fixture exported (tests/CMakeLists.txt: torchscript_export).
std::string module(const std::string& cut, const std::string& file) {
  return std::string(SKYTRAIN_TORCHSCRIPT_DIR) + "/" + cut + "/" + file;
}

Json specFor(const std::vector<std::string>& daemons, const std::string& cut, int microBatches,
             const std::string& loss = "cross_entropy") {
  Json stages = Json::array();
  for (size_t i = 0; i < daemons.size(); ++i) {
    Json stage = {{"daemon", daemons[i]}, {"module", module(cut, "stage-" + std::to_string(i) + ".pt")}};
    if (i > 0) stage["input_shape"] = {kSeqLen, 32};
    stages.push_back(stage);
  }
  return {{"name", "torchscript"},
          {"seed", 11},
          {"steps", kSteps},
          {"batch_size", kBatch},
          {"micro_batches", microBatches},
          {"schedule", "1f1b"},
          {"model", {{"kind", "torchscript"}, {"vocab_size", 256}, {"seq_len", kSeqLen}, {"loss", loss}}},
          {"data", {{"files", {SKYTRAIN_TEST_CORPUS}}}},
          {"optimizer", {{"lr", 1e-3}, {"clip_norm", 0.5}, {"no_decay", Json::array()}}},  // one group, as below
          {"eval", {{"samples", 8}}},
          {"stages", stages}};
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> parameters;
};

// The uncut module, trained on the whole batch in this process with PyTorch's recipe.
Trained trainWhole(const std::string& cut) {
  torch::jit::Module whole = torch::jit::load(module(cut, "whole.pt"));
  whole.train(true);
  std::vector<at::Tensor> parameters;  // each tensor once: a tied one is two names of one tensor
  for (const auto& p : whole.parameters()) {
    bool seen = false;
    for (const auto& q : parameters) seen = seen || q.is_same(p);
    if (!seen) parameters.push_back(p);
  }
  stages::TextDataOptions options;
  options.files = {SKYTRAIN_TEST_CORPUS};
  options.seqLen = kSeqLen;
  options.seed = 11;
  stages::TextDataSource data(options);
  torch::optim::AdamW optimizer(parameters,
                                torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.01));
  Trained out;
  for (int step = 0; step < kSteps; ++step) {
    const auto batch = data.trainBatch(step, 0, kBatch);
    const at::Tensor logits = whole.forward({batch.inputs}).toTensor();
    const at::Tensor loss =
        torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), batch.targets.reshape({-1}));
    loss.backward();
    torch::nn::utils::clip_grad_norm_(parameters, 0.5);
    optimizer.step();
    optimizer.zero_grad();
    out.losses.push_back(loss.item<double>());
  }
  for (const auto& p : whole.named_parameters()) out.parameters[p.name] = p.value.detach().clone();
  return out;
}

void checkMatches(const Json& status, const Trained& reference, std::map<std::string, at::Tensor> parameters,
                  const std::string& cut = "cut2") {
  REQUIRE(status["state"] == "succeeded");
  for (int step = 0; step < kSteps; ++step) {
    CHECK(status["steps"][step]["loss"].get<double>() == Approx(reference.losses[step]).margin(kLossTolerance));
  }
  CHECK(reference.losses.back() < reference.losses.front());
  REQUIRE(parameters.size() == reference.parameters.size());
  double worst = 0, moved = 0;
  const auto initial = torch::jit::load(module(cut, "whole.pt"));
  std::map<std::string, at::Tensor> start;
  for (const auto& p : initial.named_parameters()) start[p.name] = p.value;
  for (const auto& [name, expected] : reference.parameters) {
    INFO(name);
    REQUIRE(parameters.count(name));
    worst = std::max(worst, (parameters.at(name) - expected).abs().max().item<double>());
    moved = std::max(moved, (parameters.at(name) - start.at(name)).abs().max().item<double>());
  }
  CHECK(worst <= kParameterTolerance);
  CHECK(moved > 1e-3);  // it trained: not two untouched initialisations
  WARN("max |parameter diff| " << worst);
}

std::map<std::string, at::Tensor> weightsOf(const std::vector<TestDaemon*>& daemons, const Json& status) {
  std::map<std::string, at::Tensor> all;
  for (size_t i = 0; i < daemons.size(); ++i) {
    all.merge(loadStageWeights(daemons[i]->dir() / "jobs" / status["id"].get<std::string>() /
                               ("stage-" + std::to_string(i) + ".pt")));
  }
  return all;
}

}  // namespace

TEST_CASE("a TorchScript model cut in two trains across two daemons like the uncut module in one process",
          "[integration][torchscript]") {
  TestDaemon a("tsa"), b("tsb");
  zmq::context_t context;
  const Trained reference = trainWhole("cut2");
  const int m = GENERATE(1, 2);
  const std::string loss = GENERATE(as<std::string>{}, "cross_entropy", "module");
  CAPTURE(m, loss);
  const Json status = runJob(context, a.control(), specFor({a.control(), b.control()}, "cut2", m, loss));
  INFO(status.dump());
  checkMatches(status, reference, weightsOf({&a, &b}, status));
  CHECK(status["evals"].size() == 1);  // validation through the same loss
}

TEST_CASE("a model exported with torch.jit.trace trains across daemons like one process, as a scripted one does",
          "[integration][torchscript]") {
  TestDaemon a("tra"), b("trb");
  zmq::context_t context;
  const Trained reference = trainWhole("cut2traced");
  const Json status = runJob(context, a.control(), specFor({a.control(), b.control()}, "cut2traced", 2));
  INFO(status.dump());
  checkMatches(status, reference, weightsOf({&a, &b}, status), "cut2traced");
}

TEST_CASE("a TorchScript model whose head is its embedding, cut in two, keeps the two copies one matrix",
          "[integration][torchscript]") {
  TestDaemon a("tta"), b("ttb");
  zmq::context_t context;
  const Trained reference = trainWhole("cut2tied");
  Json spec = specFor({a.control(), b.control()}, "cut2tied", 2);
  spec["model"]["tied"] = Json::array({Json::array({"layers.embed.tok.weight", "layers.head.logits.weight"})});
  const Json status = runJob(context, a.control(), spec);
  INFO(status.dump());
  const auto weights = weightsOf({&a, &b}, status);
  REQUIRE(weights.count("layers.embed.tok.weight"));
  CHECK(torch::equal(weights.at("layers.embed.tok.weight"), weights.at("layers.head.logits.weight")));
  checkMatches(status, reference, weights, "cut2tied");

  spec["model"]["tied"] = Json::array({Json::array({"layers.embed.tok.weight", "layers.head.no_such.weight"})});
  const Json refused = runJob(context, a.control(), spec);
  CHECK(refused["state"] == "failed");
  CHECK_THAT(refused["error"].get<std::string>(), Catch::Contains("model.tied names \"layers.head.no_such.weight\""));
}

TEST_CASE("a TorchScript model cut in three trains across three daemons like one process",
          "[integration][torchscript]") {
  TestDaemon a("t3a"), b("t3b"), c("t3c");
  zmq::context_t context;
  // The later stages' input_shape given, or left out: inferred from the previous stage's
  // output when the job is prepared, and said in the job's events.
  const bool inferred = GENERATE(false, true);
  CAPTURE(inferred);
  Json spec = specFor({a.control(), b.control(), c.control()}, "cut3", 2);
  if (inferred) {
    spec["stages"][1].erase("input_shape");
    spec["stages"][2].erase("input_shape");
  }
  const Json status = runJob(context, a.control(), spec);
  INFO(status.dump());
  checkMatches(status, trainWhole("cut3"), weightsOf({&a, &b, &c}, status));
  const std::string events = status["events"].dump();
  CHECK((events.find("stage 1 takes [16, 32] a sample, inferred from stage 0's output") != std::string::npos) == inferred);
  CHECK((events.find("stage 2 takes [16, 32] a sample, inferred from stage 1's output") != std::string::npos) == inferred);
}

TEST_CASE("malformed, wrong-shaped and missing TorchScript modules are refused with the file and the reason",
          "[integration][torchscript]") {
  TestDaemon a("tba"), b("tbb");
  zmq::context_t context;
  const auto dir = a.dir() / "modules";
  std::filesystem::create_directories(dir);
  auto failsWith = [&](Json spec, const std::vector<std::string>& needles) {
    const Json status = runJob(context, a.control(), spec);
    INFO(status.dump());
    REQUIRE(status["state"] == "failed");
    CHECK(status["restarts"] == 0);  // a bad model would fail again: no restarts
    for (const auto& needle : needles) CHECK(status["error"].get<std::string>().find(needle) != std::string::npos);
  };
  Json spec = specFor({a.control(), b.control()}, "cut2", 2);

  SECTION("a file that is not TorchScript") {
    const std::string garbage = (dir / "garbage.pt").string();
    std::ofstream(garbage) << "PK\x03\x04 not really a zip archive";
    spec["stages"][1]["module"] = garbage;
    failsWith(spec, {"bad model", garbage, "not a loadable TorchScript module"});
  }
  SECTION("a module whose output is not what the next stage takes") {
    spec["stages"][1]["input_shape"] = {kSeqLen, 31};
    // Stage 0's output does not fit, nor does stage 1's module take [16, 31]: either says so.
    failsWith(spec, {"bad model", "[2, 16, 31]"});
  }
  SECTION("an input_shape left out after a module that is not TorchScript: nothing to infer it from") {
    const std::string garbage = (dir / "garbage0.pt").string();
    std::ofstream(garbage) << "PK\x03\x04 not really a zip archive";
    spec["stages"][0]["module"] = garbage;
    spec["stages"][1].erase("input_shape");
    failsWith(spec, {"bad model", garbage});
  }
  SECTION("a last stage whose output is not logits over the vocabulary") {
    spec["model"]["vocab_size"] = 300;
    failsWith(spec, {"bad model", "stage-1.pt", "[2, 16, 300]"});
  }
  SECTION("model.loss \"module\" and a module without loss()") {
    spec["model"]["loss"] = "module";
    spec["stages"][1]["module"] = module("cut3", "stage-1.pt");  // a middle part: no loss()
    failsWith(spec, {"bad model", "cut3/stage-1.pt", "no loss(output, targets) method"});
  }
  SECTION("a module that does not exist") {
    spec["stages"][1]["module"] = (dir / "missing.pt").string();
    failsWith(spec, {"$.stages[1].module", "missing.pt", "cannot be resolved"});
  }
}

TEST_CASE("the model kinds a spec may name are the registry's", "[torchscript]") {
  CHECK(protocol::modelKinds() == stages::modelKinds());
  CHECK_THROWS_WITH(stages::makeModelSource([] { stages::ModelConfig c; c.kind = "bert"; return c; }()), Catch::Contains("valid: classifier, electra, encoder, gpt, gpt2, llama, torchscript"));
}

TEST_CASE("a TorchScript stage that fails on its declared input says why, not where", "[torchscript]") {
  stages::ModelConfig c;
  c.kind = "torchscript";
  c.gpt.seqLen = kSeqLen;
  c.stages = {{0, 0, module("cut2", "stage-0.pt"), {}}, {0, 0, module("cut2", "stage-1.pt"), {kSeqLen, 31}}};
  const auto source = stages::makeModelSource(c);
  try {
    source->build(1);
    FAIL("built");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("stage-1.pt (stage 1): forward on float32 [2, 16, 31] failed: RuntimeError: "));
    CHECK_THAT(what, Catch::Contains("31"));
    CHECK(what.find("Traceback") == std::string::npos);
  }
}
