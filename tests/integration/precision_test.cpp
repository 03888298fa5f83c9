// Mixed precision and loss scaling across two daemons, against the one-process reference
// (reference_trainer.h): bf16 to the bit; dynamic loss scaling exact at a safe scale and
// skipping on every stage where the gradients overflow; and, where a GPU exists, fp16.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>

#include "daemon_fixture.h"
#include "reference_trainer.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;

namespace {

// The largest |difference| between the pipeline's final weights and the reference's.
double worstDifference(const std::map<std::string, at::Tensor>& parameters, const Trained& reference) {
  REQUIRE(parameters.size() == reference.parameters.size());
  double worst = 0;
  for (const auto& [name, expected] : reference.parameters) {
    INFO(name);
    REQUIRE(parameters.count(name));
    worst = std::max(worst, (parameters.at(name) - expected).abs().max().item<double>());
  }
  return worst;
}

int skippedSteps(const Json& status) {
  int skipped = 0;
  for (const auto& step : status["steps"]) skipped += step.value("skipped", false);
  return skipped;
}

}  // namespace

TEST_CASE("bf16 mixed precision: the pipeline trains like one process in bf16, with recompute too", "[integration]") {
  TestDaemon a("a"), b("b");
  zmq::context_t context;
  Json spec = equivalenceSpec("gpipe", 1, a.control(), b.control());
  spec["precision"] = "bf16";
  spec["compression"] = {{"forward", "none"}, {"backward", "none"}};  // the default would be the bf16 codec
  const Trained reference = trainReference(spec);
  Json fp32 = equivalenceSpec("gpipe", 1, a.control(), b.control());
  const Trained full = trainReference(fp32);
  const std::string recompute = GENERATE(as<std::string>{}, "none", "block");
  CAPTURE(recompute);
  spec["model"]["recompute"] = recompute;
  const Json status = runJob(context, a.control(), spec);
  REQUIRE(status["state"] == "succeeded");
  // One micro-batch: the same bf16 arithmetic as the one process, to the bit.
  for (int step = 0; step < kEquivalenceSteps; ++step) CHECK(status["steps"][step]["loss"] == reference.losses[step]);
  const std::string job = status["id"];
  auto parameters = pipelineWeights(a, b, job);
  double fromFp32 = 0;
  for (const auto& [name, expected] : reference.parameters) {
    INFO(name);
    REQUIRE(parameters.count(name));
    CHECK(parameters.at(name).scalar_type() == at::kFloat);  // fp32 master weights
    CHECK(torch::equal(parameters.at(name), expected));
    fromFp32 = std::max(fromFp32, (expected - full.parameters.at(name)).abs().max().item<double>());
  }
  // And bf16 is really in use: the losses and weights differ from fp32's, a little.
  CHECK(reference.losses.back() != full.losses.back());
  CHECK(std::abs(reference.losses.back() - full.losses.back()) < 0.05);
  CHECK(fromFp32 > 0);
  WARN("bf16 against fp32: final loss " << reference.losses.back() << " vs " << full.losses.back()
                                        << ", max |parameter diff| " << fromFp32);
}

TEST_CASE("dynamic loss scaling by a power of two changes no digit of the training", "[integration]") {
  TestDaemon a("a"), b("b");
  zmq::context_t context;
  const Trained unscaled = trainReference(equivalenceSpec("gpipe", 1, a.control(), b.control()));
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "zb-h1");
  CAPTURE(schedule);
  Json spec = equivalenceSpec(schedule, 1, a.control(), b.control(),
                              {{"lr", 1e-3}, {"loss_scale", {{"init", 1024}, {"growth_interval", 2}}}});
  const Json status = runJob(context, a.control(), spec);
  REQUIRE(status["state"] == "succeeded");
  CHECK(skippedSteps(status) == 0);
  for (int step = 0; step < kEquivalenceSteps; ++step) CHECK(status["steps"][step]["loss"] == unscaled.losses[step]);
  // Scaled by 2^10..2^11 on the way back and divided again: the same weights to the bit.
  CHECK(worstDifference(pipelineWeights(a, b, status["id"]), unscaled) == 0.0);
}

TEST_CASE("an overflow under loss scaling skips the step on every stage and halves the scale", "[integration]") {
  TestDaemon a("a"), b("b");
  zmq::context_t context;
  // 2^127: the first steps' gradients overflow fp32; each skip halves the scale until they
  // fit, and growth every 2 good steps brings the overflow back.
  const Json optimizer = {{"lr", 1e-3}, {"loss_scale", {{"init", std::ldexp(1.0, 127)}, {"growth_interval", 2}}}};
  Json spec = equivalenceSpec("1f1b", 1, a.control(), b.control(), optimizer);
  spec["steps"] = 10;
  const Trained reference = trainReference(spec);
  REQUIRE(reference.skippedSteps > 0);
  REQUIRE(reference.skippedSteps < 10);
  const Json status = runJob(context, a.control(), spec);
  REQUIRE(status["state"] == "succeeded");
  CHECK(skippedSteps(status) == reference.skippedSteps);
  for (int step = 0; step < 10; ++step) {
    CHECK(status["steps"][step]["loss"] == reference.losses[step]);
    CHECK(std::isfinite(status["steps"][step]["loss"].get<double>()));
  }
  CHECK(worstDifference(pipelineWeights(a, b, status["id"]), reference) == 0.0);
  WARN("loss scale 2^127, growth every 2 steps: " << reference.skippedSteps << " of 10 steps skipped");

  // A backward codec that refuses non-finite input (int8): the overflowing gradient crosses
  // uncompressed instead, and the step is skipped as before rather than failing the job.
  spec["compression"] = {{"forward", "none"}, {"backward", "int8"}};
  const Json int8 = runJob(context, a.control(), spec);
  REQUIRE(int8["state"] == "succeeded");
  CHECK(skippedSteps(int8) == reference.skippedSteps);
}

TEST_CASE("a stage on a GPU trains like one process (where a GPU exists)", "[integration][gpu]") {
  if (!torch::cuda::is_available()) {
    WARN("skipped: this LibTorch sees no CUDA device (Debian's libtorch-dev is CPU-only; build against a CUDA "
         "LibTorch with CMAKE_PREFIX_PATH on a GPU machine to run it)");
    return;
  }
  TestDaemon a("a"), b("b");
  zmq::context_t context;
  Json spec = equivalenceSpec("1f1b", 2, a.control(), b.control());
  const Trained reference = trainReference(spec);
  spec["stages"][1]["device"] = "cuda";  // stage 0 stays on the CPU: frames cross devices too
  if (torch::cuda::device_count() >= 2) {  // NCCL takes one GPU per copy
    spec["stages"][0]["replicas"] = {{{"daemon", a.control()}, {"device", "cuda:1"}}};
    spec["stages"][0]["device"] = "cuda:0";
    spec["stages"][1]["replicas"] = {{{"daemon", b.control()}, {"device", "cuda:1"}}};
  }
  const Json status = runJob(context, a.control(), spec);
  REQUIRE(status["state"] == "succeeded");
  const std::string job = status["id"];
  auto parameters = pipelineWeights(a, b, job);
  for (const auto& [name, expected] : reference.parameters) {
    INFO(name);
    REQUIRE(parameters.count(name));
    CHECK((parameters.at(name) - expected).abs().max().item<double>() <= 1e-3);  // GPU kernels reassociate more
  }
}

TEST_CASE("fp16 with dynamic loss scaling on a GPU trains close to fp32 (where a GPU exists)", "[integration][gpu]") {
  if (!torch::cuda::is_available()) {
    WARN("skipped: this LibTorch sees no CUDA device (fp16 autocast is CUDA-only)");
    return;
  }
  TestDaemon a("a"), b("b");
  zmq::context_t context;
  Json spec = equivalenceSpec("1f1b", 2, a.control(), b.control());
  spec["steps"] = 20;
  const Trained fp32 = trainReference(spec);
  spec["precision"] = "fp16";
  spec["stages"][0]["device"] = "cuda";
  spec["stages"][1]["device"] = "cuda";
  const Json status = runJob(context, a.control(), spec);
  REQUIRE(status["state"] == "succeeded");
  CHECK(skippedSteps(status) == 0);  // 2^16 is safe for this model
  const double last = status["steps"][19]["loss"];
  CHECK(last == Approx(fp32.losses[19]).margin(0.05));
  const double worst = worstDifference(pipelineWeights(a, b, status["id"]), fp32);
  CHECK(worst > 0);  // fp16 is really in use
  CHECK(worst < 0.05);
  WARN("fp16 on CUDA against fp32 on the CPU: final loss " << last << " vs " << fp32.losses[19]
                                                             << ", max |parameter diff| " << worst);
}
