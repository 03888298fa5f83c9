// A NaN or Inf loss or gradient is caught at the step where it appears, named, and handled
// by policy (optimizer.on_nonfinite): fail the job, or skip the update and count it.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "daemon/stage/runner/pipeline_runner.h"
#include "scheduler/error.h"

using namespace skytrain;

namespace {

protocol::JobSpec oneStage(const std::string& policy, double clip) {
  const nlohmann::json spec = {
      {"steps", 4}, {"batch_size", 2}, {"micro_batches", 1}, {"schedule", "1f1b"},
      {"model", {{"d_model", 16}, {"heads", 2}, {"layers", 1}, {"d_ff", 32}, {"seq_len", 8}}},
      {"optimizer", {{"on_nonfinite", policy}, {"clip_norm", clip}}},
      {"data", {{"files", {SKYTRAIN_TEST_CORPUS}}}},
      {"stages", {{{"daemon", "tcp://a:1"}, {"layers", {0, 1}}}}}};
  return protocol::parseJobSpec(spec.dump());
}

// Poisons one weight of the LM head, so the loss of the next step is NaN.
void poison(daemon::PipelineRunner& runner) {
  for (const auto& [name, tensor] : runner.stage().stateDict()) {
    if (name.find("head") != std::string::npos) {
      torch::NoGradGuard guard;
      tensor.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
      return;
    }
  }
  FAIL("no head parameter");
}

}  // namespace

TEST_CASE("on_nonfinite fail: the step fails naming the stage, the step and the loss") {
  daemon::PipelineRunner runner(oneStage("fail", 0), 0, 1, 1e9);
  runner.connect(nullptr, nullptr);
  CHECK(std::isfinite(runner.runStep(0).loss));
  poison(runner);
  CHECK_THROWS_WITH(runner.runStep(1), Catch::StartsWith("non-finite: the loss of step 2 micro-batch 0 is ") && Catch::Contains("nan (stage 0)"));
}

TEST_CASE("on_nonfinite skip: the step is not applied, and training goes on") {
  for (double clip : {0.0, 1.0}) {
    CAPTURE(clip);
    daemon::PipelineRunner runner(oneStage("skip", clip), 0, 1, 1e9);
    runner.connect(nullptr, nullptr);
    runner.runStep(0);
    std::map<std::string, at::Tensor> before;
    for (const auto& [name, tensor] : runner.stage().stateDict()) before[name] = tensor.detach().clone();
    // The NaN loss makes every gradient NaN: no weight may move.
    poison(runner);
    const daemon::StepStats stats = runner.runStep(1);
    CHECK(stats.skipped);
    for (const auto& [name, tensor] : runner.stage().stateDict()) {
      if (name.find("head") != std::string::npos) continue;  // the poisoned one
      INFO(name);
      CHECK(torch::equal(tensor, before.at(name)));  // no update was applied
    }
  }
}
