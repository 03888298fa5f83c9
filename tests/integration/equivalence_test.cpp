// The central correctness test (DESIGN.md "The data path of one step"): two stages in two
// daemons over TCP loopback, no compression, compute the same losses and the same final
// parameters as training the unsplit model in one process on the whole batch.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <set>

#include "daemon_fixture.h"
#include "reference_trainer.h"
#include "daemon/protocol/spec/job_spec.h"
#include "stages/models/gpt.h"
#include "stages/weights/safetensors.h"

using namespace skytrain;
using namespace skytrain::testing;
using nlohmann::json;
using Json = nlohmann::json;

namespace {

// Tolerances, float32. The pipeline splits the batch into micro-batches and sums their
// gradients, the reference takes the mean over the whole batch at once, so results differ
// by float reassociation only: ~1e-7 relative per op, amplified a little by AdamW's
// normalisation over a few steps.
constexpr double kLossTolerance = 1e-4;
constexpr double kParameterTolerance = 1e-4;

constexpr int kSteps = kEquivalenceSteps;

}  // namespace

TEST_CASE("a two-daemon pipeline trains exactly like one process", "[integration]") {
  TestDaemon a("a"), b("b");
  zmq::context_t context;
  const Trained reference = trainReference(equivalenceSpec("gpipe", 1, a.control(), b.control()));

  // zb-h1: each backward's linear weight gradients wait for a W pass (stages/split_backward.h).
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b", "zb-h1");
  const int m = GENERATE(1, 2, 4);
  CAPTURE(schedule, m);
  const Json status = runJob(context, a.control(), equivalenceSpec(schedule, m, a.control(), b.control()));
  REQUIRE(status["state"] == "succeeded");
  REQUIRE(status["steps"].size() == kSteps);
  if (schedule == "zb-h1") {  // the stages ran split: the profile timed their W passes
    const Json& plan = status["plans"].back();
    CHECK(plan["schedule"] == "zb-h1");
    // The fitted W time of one sample, not the slope alone: this model's W pass takes
    // microseconds, and on a loaded machine the fit can come out flat (k = 0, a > 0).
    for (const auto& stage : plan["stages"]) {
      CHECK(stage["weight_s"]["a"].get<double>() + stage["weight_s"]["k"].get<double>() > 0);
    }
  }

  double worstLoss = 0;
  for (int step = 0; step < kSteps; ++step) {
    const double loss = status["steps"][step]["loss"];
    worstLoss = std::max(worstLoss, std::abs(loss - reference.losses[step]));
    CHECK(loss == Approx(reference.losses[step]).margin(kLossTolerance));
  }
  CHECK(reference.losses.back() < reference.losses.front());  // it trains at all

  const std::string job = status["id"];
  auto parameters = pipelineWeights(a, b, job);
  REQUIRE(parameters.size() == reference.parameters.size());
  double worstParameter = 0;
  for (const auto& [name, expected] : reference.parameters) {
    INFO(name);
    REQUIRE(parameters.count(name));
    const double diff = (parameters.at(name) - expected).abs().max().item<double>();
    worstParameter = std::max(worstParameter, diff);
    CHECK(diff <= kParameterTolerance);
  }
  // With one micro-batch the pipeline does the very same float operations as the reference
  // (ZB-H1's W pass included: it computes dy^T x as nn::Linear's backward does).
  if (m == 1) {
    CHECK(worstLoss == 0.0);
    CHECK(worstParameter == 0.0);
  }
  WARN(schedule << " m=" << m << ": max |loss diff| " << worstLoss << ", max |parameter diff| " << worstParameter);
  // The run moved the weights: the comparison is not between two untouched initialisations.
  const auto initial = stages::makeGptStage(stages::GptConfig{256, 32, 4, 4, 64, 16, 0.0}, 0, 4, 11)->stateDict();
  double moved = 0;
  for (const auto& [name, tensor] : initial) moved = std::max(moved, (parameters.at(name) - tensor).abs().max().item<double>());
  CHECK(moved > 1e-3);
}

TEST_CASE("two replicas of each stage, averaging gradients over c10d Gloo, train like one process", "[integration]") {
  // Stage 0's copies on daemons a and c, stage 1's both on daemon b (two copies of one daemon):
  // replica r of stage 0 feeds replica r of stage 1, each pipeline on half of every batch.
  TestDaemon a("a"), b("b"), c("c");
  zmq::context_t context;
  const int m = GENERATE(1, 2);
  CAPTURE(m);
  Json spec = equivalenceSpec("1f1b", m, a.control(), b.control(), {{"lr", 1e-3}, {"clip_norm", 0.5}});
  const Trained reference = trainReference(spec);
  const Json plain = runJob(context, a.control(), spec);
  REQUIRE(plain["state"] == "succeeded");
  spec["stages"][0]["replicas"] = {{{"daemon", c.control()}}};
  spec["stages"][1]["replicas"] = {{{"daemon", b.control()}, {"device", "cpu"}}};
  const Json status = runJob(context, a.control(), spec);
  REQUIRE(status["state"] == "succeeded");
  REQUIRE(status["steps"].size() == kSteps);
  double worstLoss = 0;
  for (int step = 0; step < kSteps; ++step) {
    const double loss = status["steps"][step]["loss"];  // the mean of the two halves' losses
    worstLoss = std::max(worstLoss, std::abs(loss - reference.losses[step]));
    CHECK(loss == Approx(reference.losses[step]).margin(kLossTolerance));
  }
  // Each sample's activations and gradients cross between the stages once, as without
  // copies: only the small clipping-norm frames are per pipeline.
  const double rawPlain = plain["steps"][1]["bytes_raw"], rawReplicated = status["steps"][1]["bytes_raw"];
  CHECK(rawReplicated == Approx(rawPlain).epsilon(0.01));
  const std::string job = status["id"];
  // Every copy ends with the same weights, and they are the whole batch's.
  double worstParameter = 0, worstCopy = 0;
  for (int stage = 0; stage < 2; ++stage) {
    const auto& first = stage == 0 ? a : b;
    const auto& second = stage == 0 ? c : b;
    const std::string file = "stage-" + std::to_string(stage) + ".pt";
    const auto replica0 = loadStageWeights(first.dir() / "jobs" / job / file);
    const auto replica1 = loadStageWeights(second.dir() / "jobs" / job / "replica-1" / file);
    REQUIRE(replica0.size() == replica1.size());
    for (const auto& [name, tensor] : replica0) {
      INFO(name);
      REQUIRE(reference.parameters.count(name));
      worstCopy = std::max(worstCopy, (tensor - replica1.at(name)).abs().max().item<double>());
      const double diff = (tensor - reference.parameters.at(name)).abs().max().item<double>();
      worstParameter = std::max(worstParameter, diff);
      CHECK(diff <= kParameterTolerance);
    }
  }
  CHECK(worstCopy == 0.0);  // the same averaged gradients, the same AdamW: bit-identical copies
  WARN("2 replicas, m=" << m << ": max |loss diff| " << worstLoss << ", max |parameter diff| " << worstParameter);
  // The plan knows the copies: half the batch per pipeline, and a measured all-reduce.
  const Json& plan = status["plans"].back();
  CHECK(plan["replicas"] == 2);
  CHECK(plan["batch_per_replica"] == 4);
  CHECK(plan["stages"][0]["allreduce_s"].get<double>() > 0);
  CHECK(plan["allreduce_s"].get<double>() > 0);
}

TEST_CASE("a replicated stage is refused, with the reason, by a daemon without a private address", "[integration]") {
  TestDaemonOptions noPrivate;
  noPrivate.privateAddress = "";
  TestDaemon a("a"), b("b", noPrivate);
  zmq::context_t context;
  Json spec = equivalenceSpec("1f1b", 1, a.control(), b.control());
  spec["stages"][0]["replicas"] = {{{"daemon", a.control()}}};
  spec["stages"][1]["replicas"] = {{{"daemon", b.control()}}};
  const Json status = runJob(context, a.control(), spec);
  REQUIRE(status["state"] == "failed");
  CHECK_THAT(status["error"].get<std::string>(), Catch::Contains("private_address") && Catch::Contains("stage 1"));
  // A device this daemon does not have is named, never replaced by the CPU.
  Json gpu = equivalenceSpec("1f1b", 1, a.control(), b.control());
  gpu["stages"][1]["device"] = "cuda:1";
  const Json refused = runJob(context, a.control(), gpu);
  REQUIRE(refused["state"] == "failed");
  CHECK_THAT(refused["error"].get<std::string>(), Catch::Contains("cuda:1") && Catch::Contains("not available"));
}

TEST_CASE("with warm-up, cosine decay and global-norm clipping the pipeline still trains like one process",
          "[integration]") {
  TestDaemon a("ca"), b("cb");
  zmq::context_t context;
  const Json optimizer = {{"lr", 2e-3}, {"schedule", "cosine"}, {"warmup_steps", 2}, {"min_lr", 2e-4},
                          {"clip_norm", 0.5}};
  const Trained reference = trainReference(equivalenceSpec("1f1b", 1, a.control(), b.control(), optimizer));
  REQUIRE(reference.clippedSteps == kSteps);  // the clip binds: the test compares clipped updates
  const int m = GENERATE(1, 2);
  CAPTURE(m);
  const Json status = runJob(context, a.control(), equivalenceSpec("1f1b", m, a.control(), b.control(), optimizer));
  REQUIRE(status["state"] == "succeeded");
  const std::string job = status["id"];
  auto parameters = pipelineWeights(a, b, job);
  double worst = 0;
  for (const auto& [name, expected] : reference.parameters) {
    INFO(name);
    worst = std::max(worst, (parameters.at(name) - expected).abs().max().item<double>());
  }
  for (int step = 0; step < kSteps; ++step) {
    CHECK(status["steps"][step]["lr"].get<double>() == protocol::learningRate(protocol::parseJobSpec(
                                                           equivalenceSpec("1f1b", m, "tcp://x:1", "tcp://y:1", optimizer).dump())
                                                           .optimizer,
                                                       step, kSteps));
  }
  // m = 1: the same float operations in the same order, the norm included.
  if (m == 1) CHECK(worst == 0.0);
  CHECK(worst <= kParameterTolerance);
  WARN("clipped, m=" << m << ": max |parameter diff| " << worst);
}

TEST_CASE("weights from init_from and frozen parameters: the pipeline still trains like one process",
          "[integration]") {
  TestDaemon a("fa"), b("fb");
  zmq::context_t context;
  // Pretrained weights: the same model from another seed, as a safetensors file.
  const auto file = a.dir() / "pretrained.safetensors";
  stages::SafeTensors pretrained;
  for (const auto& [name, tensor] : stages::makeGptStage(stages::GptConfig{256, 32, 4, 4, 64, 16, 0.0}, 0, 4, 99)->stateDict()) {
    pretrained.tensors.emplace_back(name, tensor.detach().clone());
  }
  std::ofstream(file, std::ios::binary) << stages::encodeSafetensors(pretrained);
  // Stage 0 (embeddings, blocks 0-1) is frozen whole; stage 1 trains block 3 and the head.
  Json spec = equivalenceSpec("1f1b", 2, a.control(), b.control(), {{"lr", 2e-3}, {"clip_norm", 0.5}});
  spec["model"]["init_from"] = file.string();
  spec["model"]["trainable"] = {"block3.*", "ln_f.*", "head.*"};
  const Trained reference = trainReference(spec);
  const Json status = runJob(context, a.control(), spec);
  INFO(status.dump());
  REQUIRE(status["state"] == "succeeded");
  const Json& plan = status["plans"].back();
  CHECK(plan["stages"][0]["parameters"]["trainable"] == 0);
  CHECK(plan["stages"][0]["parameters"]["frozen"].get<int64_t>() > 0);
  CHECK(plan["stages"][1]["parameters"]["trainable"].get<int64_t>() > 0);
  CHECK(plan["stages"][1]["parameters"]["frozen"].get<int64_t>() > 0);
  CHECK(plan["stages"][1]["init_from"][0]["from_seed"] == 0);
  const std::string job = status["id"];
  auto parameters = pipelineWeights(a, b, job);
  std::map<std::string, at::Tensor> start(pretrained.tensors.begin(), pretrained.tensors.end());
  double worst = 0;
  for (const auto& [name, expected] : reference.parameters) {
    INFO(name);
    worst = std::max(worst, (parameters.at(name) - expected).abs().max().item<double>());
    const bool trains = name.rfind("block3.", 0) == 0 || name.rfind("ln_f.", 0) == 0 || name.rfind("head.", 0) == 0;
    const double moved = (parameters.at(name) - start.at(name)).abs().max().item<double>();
    if (trains) CHECK(moved > 0);
    else CHECK(moved == 0.0);  // frozen: exactly the file's weights
  }
  CHECK(worst <= kParameterTolerance);
  WARN("init_from + frozen, m=2: max |parameter diff| " << worst);
}

TEST_CASE("init_from refuses a file whose tensors do not fit, listing every mismatch", "[integration]") {
  TestDaemon a("ma"), b("mb");
  zmq::context_t context;
  const auto file = a.dir() / "wrong.safetensors";
  stages::SafeTensors wrong;
  for (const auto& [name, tensor] : stages::makeGptStage(stages::GptConfig{256, 48, 4, 4, 64, 16, 0.0}, 0, 4, 1)->stateDict()) {
    wrong.tensors.emplace_back(name, tensor.detach().clone());  // d_model 48, not 32
  }
  std::ofstream(file, std::ios::binary) << stages::encodeSafetensors(wrong);
  Json spec = equivalenceSpec("1f1b", 2, a.control(), b.control());
  spec["model"]["init_from"] = {file.string()};
  const Json status = runJob(context, a.control(), spec);
  INFO(status.dump());
  REQUIRE(status["state"] == "failed");
  CHECK(status["restarts"] == 0);
  const std::string error = status["error"];
  CHECK(error.find("bad model: init_from " + file.string()) != std::string::npos);
  CHECK(error.find("mismatches") != std::string::npos);
  CHECK(error.find("[48]") != std::string::npos);
  CHECK(error.find("and ") != std::string::npos);  // more than the 20 it names
}

TEST_CASE("the one-step-delayed update trains like PipeDream-2BW's update with weight prediction in one process",
          "[integration]") {
  TestDaemon a("da"), b("db");
  zmq::context_t context;
  // One synchronous warm-up step, then three delayed (the last two applied at the end).
  const Json optimizer = {{"lr", 2e-3}, {"schedule", "cosine"}, {"warmup_steps", 1}, {"min_lr", 2e-4},
                          {"clip_norm", 0.5}};
  const Json plain = equivalenceSpec("1f1b", 1, a.control(), b.control(), optimizer);
  const Trained reference = trainReference(plain, true);
  const Trained synchronous = trainReference(plain);
  REQUIRE(reference.clippedSteps == kSteps);
  const auto [schedule, m] = GENERATE(std::make_pair("1f1b", 1), std::make_pair("1f1b", 2),
                                      std::make_pair("1f1b", 4), std::make_pair("1f1b-delay", 4));
  CAPTURE(schedule, m);
  Json spec = equivalenceSpec(schedule, m, a.control(), b.control(), optimizer);
  spec["update"] = "delayed";
  // Boundaries mid-run drain the rounds (a checkpoint after step 1, validation after each step);
  // the update's arithmetic must not depend on them.
  spec["checkpoint"] = {{"interval", 2}};
  spec["eval"]["interval"] = 1;
  const Json status = runJob(context, a.control(), spec);
  REQUIRE(status["state"] == "succeeded");
  for (int step = 0; step < kSteps; ++step) {
    CHECK(status["steps"][step]["loss"].get<double>() == Approx(reference.losses[step]).margin(kLossTolerance));
  }
  const std::string job = status["id"];
  auto parameters = pipelineWeights(a, b, job);
  double worst = 0, fromSync = 0;
  for (const auto& [name, expected] : reference.parameters) {
    INFO(name);
    REQUIRE(parameters.count(name));
    worst = std::max(worst, (parameters.at(name) - expected).abs().max().item<double>());
    fromSync = std::max(fromSync, (parameters.at(name) - synchronous.parameters.at(name)).abs().max().item<double>());
  }
  CHECK(worst <= kParameterTolerance);
  CHECK(fromSync > 10 * kParameterTolerance);  // it is not the synchronous update
  if (m == 1) CHECK(worst == 0.0);
  WARN("delayed " << schedule << " m=" << m << ": max |parameter diff| " << worst << " (from the synchronous update "
                  << fromSync << ")");
  auto checkpointNames = [&](const char* step) {
    std::ifstream in(a.dir() / "jobs" / job / "checkpoints" / step / "stage-0.safetensors", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::set<std::string> names;
    for (const auto& [name, tensor] : stages::decodeSafetensors(bytes, step).tensors) names.insert(name);
    return names;
  };
  // The checkpoint after the second step holds its gradient, not yet applied (the first's was,
  // in the warm-up)...
  const auto early = checkpointNames("step-00000002");
  CHECK(early.count("pending/0/step"));
  CHECK(early.count("pending/0/total"));
  CHECK_FALSE(early.count("pending/1/step"));
  // ... the last one the weights before the last update (for the prediction), one per state tensor.
  size_t previous = 0, parameters0 = 0;
  for (const auto& name : checkpointNames("step-00000004")) {
    previous += name.rfind("previous/", 0) == 0;
    parameters0 += name.rfind("param/", 0) == 0;
  }
  CHECK(previous == parameters0);
}

TEST_CASE("block recompute across two daemons trains bit for bit like keeping the activations", "[integration]") {
  TestDaemon a("a"), b("b");
  zmq::context_t context;
  const std::string kind = GENERATE(as<std::string>{}, "gpt", "llama");
  const std::string schedule = GENERATE(as<std::string>{}, "1f1b", "zb-h1");
  CAPTURE(kind, schedule);
  Json spec = twoStageSpec(a.control(), b.control(), 6);
  spec["model"]["kind"] = kind;
  spec["schedule"] = schedule;
  spec["optimizer"] = {{"lr", 0.01}, {"clip_norm", 1.0}};
  const Json kept = runJob(context, a.control(), spec);
  spec["model"]["recompute"] = "block";
  const Json replayed = runJob(context, a.control(), spec);
  REQUIRE(kept["state"] == "succeeded");
  REQUIRE(replayed["state"] == "succeeded");
  for (size_t step = 0; step < kept["steps"].size(); ++step) {
    CHECK(kept["steps"][step]["loss"] == replayed["steps"][step]["loss"]);
  }
  requireSameWeights(kept["id"], replayed["id"], 2, {&a, &b}, {&a, &b});
}
