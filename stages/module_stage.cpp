#include "stages/module_stage.h"

#include <torch/torch.h>

#include "scheduler/error.h"

namespace skytrain::stages {

ModuleStage::ModuleStage(std::shared_ptr<torch::nn::Module> module, ForwardFn forward)
    : module_(std::move(module)), forward_(std::move(forward)) {}

at::Tensor ModuleStage::forward(int microBatch, const at::Tensor& input) {
  SKYTRAIN_CHECK(!stash_.count(microBatch), "micro-batch " << microBatch << " already in flight");
  module_->train(true);
  Stashed entry;
  at::Tensor x = input;
  if (input.is_floating_point()) {
    entry.input = input.detach().requires_grad_(true);
    x = entry.input;
  }
  entry.output = forward_(x);
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
  torch::autograd::backward({entry.output}, {gradOutput.to(entry.output.scalar_type())});
  return entry.input.defined() ? entry.input.grad() : at::Tensor();
}

at::Tensor ModuleStage::infer(const at::Tensor& input) {
  torch::NoGradGuard noGrad;
  module_->train(false);
  at::Tensor out = forward_(input);
  module_->train(true);
  return out;
}

std::vector<at::Tensor> ModuleStage::parameters() const { return module_->parameters(); }

NamedTensors ModuleStage::stateDict() const {
  NamedTensors out;
  for (const auto& item : module_->named_parameters()) out.emplace_back(item.key(), item.value());
  for (const auto& item : module_->named_buffers()) out.emplace_back(item.key(), item.value());
  return out;
}

}  // namespace skytrain::stages
