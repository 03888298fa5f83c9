#include "stages/module_stage.h"

#include <torch/torch.h>

#include "scheduler/error.h"

namespace skytrain::stages {

at::Tensor Stage::loss(const at::Tensor& output, const at::Tensor& targets) {
  return torch::nn::functional::cross_entropy(output.reshape({-1, output.size(-1)}), targets.reshape({-1}));
}

ModuleStage::ModuleStage(ModuleHooks hooks) : hooks_(std::move(hooks)) {}

ModuleStage::ModuleStage(std::shared_ptr<torch::nn::Module> module, std::function<at::Tensor(const at::Tensor&)> forward,
                         std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss) {
  hooks_.forward = std::move(forward);
  hooks_.loss = std::move(loss);
  hooks_.train = [module](bool on) { module->train(on); };
  hooks_.parameters = [module] {
    NamedTensors out;
    for (const auto& item : module->named_parameters()) out.emplace_back(item.key(), item.value());
    return out;
  };
  hooks_.buffers = [module] {
    NamedTensors out;
    for (const auto& item : module->named_buffers()) out.emplace_back(item.key(), item.value());
    return out;
  };
}

at::Tensor ModuleStage::forward(int microBatch, const at::Tensor& input) {
  SKYTRAIN_CHECK(!stash_.count(microBatch), "micro-batch " << microBatch << " already in flight");
  hooks_.train(true);
  Stashed entry;
  at::Tensor x = input;
  if (input.is_floating_point()) {
    entry.input = input.detach().requires_grad_(true);
    x = entry.input;
  }
  entry.output = hooks_.forward(x);
  at::Tensor out = entry.output.detach();
  stash_.emplace(microBatch, std::move(entry));
  return out;
}

at::Tensor ModuleStage::backward(int microBatch, const at::Tensor& gradOutput) {
  auto it = stash_.find(microBatch);
  SKYTRAIN_CHECK(it != stash_.end(), "backward of micro-batch " << microBatch << " before its forward");
  Stashed entry = std::move(it->second);
  stash_.erase(it);
  if (!gradOutput.sizes().equals(entry.output.sizes())) {
    throw Error("gradient for micro-batch " + std::to_string(microBatch) + " has shape " +
                c10::str(gradOutput.sizes()) + ", the output has " +
                c10::str(entry.output.sizes()));
  }
  if (!entry.output.requires_grad()) return at::Tensor();  // nothing before it trains
  torch::autograd::backward({entry.output}, {gradOutput.to(entry.output.scalar_type())});
  return entry.input.defined() ? entry.input.grad() : at::Tensor();
}

at::Tensor ModuleStage::infer(const at::Tensor& input) {
  torch::NoGradGuard noGrad;
  hooks_.train(false);
  at::Tensor out = hooks_.forward(input);
  hooks_.train(true);
  return out;
}

at::Tensor ModuleStage::loss(const at::Tensor& output, const at::Tensor& targets) {
  return hooks_.loss ? hooks_.loss(output, targets) : Stage::loss(output, targets);
}

std::vector<at::Tensor> ModuleStage::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& [name, tensor] : hooks_.parameters()) {
    if (tensor.requires_grad()) out.push_back(tensor);
  }
  return out;
}

NamedTensors ModuleStage::stateDict() const {
  NamedTensors out = hooks_.parameters();
  for (auto& item : hooks_.buffers()) out.push_back(std::move(item));
  return out;
}

}  // namespace skytrain::stages
