// The one-process reference of the equivalence tests (reference_trainer.h): PyTorch's own
// training recipe on the unsplit model, with the delayed update's arithmetic as an option.
#include "reference_trainer.h"

#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <utility>

#include "daemon/protocol/spec/job_spec.h"
#include "daemon/stage/state/model_setup.h"
#include "stages/models/model_source.h"
#include "stages/weights/safetensors.h"
#include "stages/data/text_data.h"
#include "stages/weights/weights.h"

namespace skytrain::testing {

Trained trainReference(const nlohmann::json& spec, bool delayed) {
  const protocol::JobSpec parsed = protocol::parseJobSpec(spec.dump());
  const protocol::OptimizerSpec o = parsed.optimizer;
  const protocol::ModelSpec& m = parsed.model;
  const int steps = parsed.steps;
  // The unsplit model: one stage holding every layer (a tied head is then the embedding itself).
  protocol::JobSpec whole = parsed;
  whole.stages.resize(1);
  whole.stages[0].firstLayer = 0;
  whole.stages[0].lastLayer = m.layers;
  auto model = stages::makeModelSource(daemon::modelConfig(whole))->build(0);
  stages::applyTrainable(*model, parsed.model.trainable);
  model->setAutocast(stages::autocastFor(parsed.precision));
  for (const auto& file : parsed.model.initFrom) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    stages::initialiseFrom(*model, stages::decodeSafetensors(bytes, file), file);
  }
  stages::TextDataOptions options;
  options.files = parsed.data.files;
  options.seqLen = m.seqLen;
  options.seed = parsed.seed;
  stages::TextDataSource data(options);
  // The same two groups as the pipeline's (one stage: a tied head is the embedding itself).
  auto made = daemon::makeOptimizer(*model, o, {}, 0);
  torch::optim::Optimizer& optimizer = *made;
  Trained out;
  std::vector<std::pair<int, std::vector<at::Tensor>>> pending;  // (step, gradients) not yet applied
  auto apply = [&](int step) {
    for (auto& group : optimizer.param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(protocol::learningRate(o, step, steps));
    }
    optimizer.step();
    optimizer.zero_grad();
  };
  std::vector<at::Tensor> prior;  // the weights before the last update (weight prediction)
  auto applyPending = [&] {
    prior.clear();
    for (const auto& [name, tensor] : model->stateDict()) prior.push_back(tensor.detach().clone());
    auto params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = pending.front().second[i];
    apply(pending.front().first);
    pending.erase(pending.begin());
  };
  double scale = o.lossScale.dynamic ? o.lossScale.init : 1.0;
  int goodSteps = 0;
  for (int step = 0; step < steps; ++step) {
    while (delayed && !pending.empty() && pending.front().first + 2 <= step) applyPending();
    std::vector<at::Tensor> current;
    if (!prior.empty() && !pending.empty() && pending.back().first + 1 == step) {
      torch::NoGradGuard noGrad;
      auto state = model->stateDict();
      for (size_t i = 0; i < state.size(); ++i) {
        current.push_back(state[i].second.detach().clone());
        state[i].second.copy_(current.back() * 2 - prior[i]);
      }
    }
    const auto batch = data.trainBatch(step, 0, parsed.batchSize);
    if (model->hasOwnLoss()) {  // a sender's loss at a cut inside: weighed as the model's loss
      model->setTargets(batch.targets);
      model->setOwnLossFactor(scale);
    }
    const at::Tensor logits = model->forward(0, batch.inputs).requires_grad_(true);
    const at::Tensor loss =
        torch::nn::functional::cross_entropy(logits.reshape({-1, m.vocabSize}), batch.targets.reshape({-1}));
    (scale == 1.0 ? loss : loss * scale).backward();
    model->backward(0, logits.grad());
    if (o.lossScale.dynamic) {  // torch.amp.GradScaler's rule, with the scale a power of two
      bool finite = true;
      for (auto& p : model->parameters()) {
        if (!p.grad().defined()) continue;
        p.mutable_grad().mul_(1.0 / scale);
        finite = finite && torch::isfinite(p.grad()).all().item<bool>();
      }
      if (!finite) {
        out.losses.push_back(loss.item<double>());
        ++out.skippedSteps;
        goodSteps = 0;
        scale = std::max(1.0, scale / 2);
        optimizer.zero_grad();
        continue;
      }
      if (++goodSteps == o.lossScale.growthInterval) {
        goodSteps = 0;
        scale = std::min(std::ldexp(1.0, 127), scale * 2);
      }
    }
    if (o.clipNorm > 0 && torch::nn::utils::clip_grad_norm_(model->parameters(), o.clipNorm) > o.clipNorm) {
      ++out.clippedSteps;
    }
    out.losses.push_back(loss.item<double>());
    if (!current.empty()) {
      torch::NoGradGuard noGrad;
      auto state = model->stateDict();
      for (size_t i = 0; i < state.size(); ++i) state[i].second.copy_(current[i]);
    }
    if (!delayed) {
      apply(step);
      continue;
    }
    std::vector<at::Tensor> grads;
    for (auto& p : model->parameters()) grads.push_back(p.grad().clone()), p.mutable_grad() = at::Tensor();
    pending.emplace_back(step, std::move(grads));
    if (step < o.warmupSteps) {
      while (!pending.empty()) applyPending();
    }
  }
  while (!pending.empty()) applyPending();
  for (const auto& [name, tensor] : model->stateDict()) out.parameters[name] = tensor.detach();
  return out;
}

nlohmann::json equivalenceSpec(const std::string& schedule, int microBatches, const std::string& stage0,
                               const std::string& stage1, const nlohmann::json& optimizer) {
  return {{"name", "equivalence"},
          {"seed", 11},
          {"steps", kEquivalenceSteps},
          {"batch_size", 8},
          {"micro_batches", microBatches},
          {"schedule", schedule},
          {"model", {{"d_model", 32}, {"heads", 4}, {"layers", 4}, {"d_ff", 64}, {"seq_len", 16}}},
          {"data", {{"files", {SKYTRAIN_TEST_CORPUS}}}},
          {"optimizer", optimizer},
          {"eval", {{"samples", 8}}},
          {"stages", {{{"daemon", stage0}, {"layers", {0, 2}}}, {{"daemon", stage1}, {"layers", {2, 4}}}}}};
}

}  // namespace skytrain::testing
