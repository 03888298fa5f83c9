// The one-process reference of the equivalence tests: a GPT job spec's unsplit model trained
// in this process on the whole batch, to compare a pipeline's losses and weights with.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace skytrain::testing {

struct Trained {
  std::vector<double> losses;
  std::map<std::string, at::Tensor> parameters;
  int clippedSteps = 0;
  int skippedSteps = 0;  // loss scaling: steps whose gradients overflowed
};

// Trains the unsplit model of `spec` (model.kind gpt, the spec's sizes, seed, batch, steps,
// data.files, init_from, trainable, precision and optimizer) on the whole batch, step by step, in this
// process: PyTorch's own recipe, the learning rate set per step, clip_grad_norm_ over all
// parameters; under optimizer.loss_scale, GradScaler's skip-and-halve rule. `delayed`: PipeDream-2BW's update instead, W(t) = W(t-1) - update(g(t-2)),
// each gradient clipped by its own norm and applied with its own step's learning rate, the
// last two at the end; step t's gradient taken at the predicted weights 2 W(t) - W(t-1)
// while g(t-1) is unapplied; the learning rate's warm-up steps synchronous.
Trained trainReference(const nlohmann::json& spec, bool delayed = false);

// The equivalence tests' job: a 4-block GPT (d 32) on the test corpus, batch 8, seed 11,
// kEquivalenceSteps steps, blocks [0, 2) on stage0's daemon and [2, 4) on stage1's.
constexpr int kEquivalenceSteps = 4;
nlohmann::json equivalenceSpec(const std::string& schedule, int microBatches, const std::string& stage0,
                               const std::string& stage1, const nlohmann::json& optimizer = {{"lr", 1e-3}});

}  // namespace skytrain::testing
