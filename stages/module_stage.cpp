#include "stages/module_stage.h"

#include <torch/torch.h>

#include "scheduler/error.h"
#include "stages/precision.h"

namespace skytrain::stages {
namespace {

// What a stage hands on is fp32 whatever autocast computed it in (a differentiable cast):
// the link's codec, not the arithmetic, decides what crosses.
at::Tensor fp32(at::Tensor out) {
  const auto type = out.scalar_type();
  return type == at::kBFloat16 || type == at::kHalf ? out.to(at::kFloat) : out;
}

}  // namespace

at::Tensor tokenCrossEntropy(const at::Tensor& logits, const at::Tensor& targets) {
  const at::Tensor flat = targets.reshape({-1});
  // -100 is cross_entropy's ignore_index (a masked LM's unmasked positions). A micro-batch
  // with no target left — one short sample can draw no mask at all — has nothing to learn:
  // its loss is zero with a zero gradient, not the 0/0 = NaN of a mean over nothing.
  if (!(flat != -100).any().item<bool>()) return logits.sum() * 0.0;
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), flat);
}

at::Tensor Stage::loss(const at::Tensor& output, const at::Tensor& targets) { return tokenCrossEntropy(output, targets); }

at::Tensor Stage::generate(const at::Tensor&, int) { throw Error("this stage does not generate text"); }

ModuleStage::ModuleStage(ModuleHooks hooks) : hooks_(std::move(hooks)) {}

ModuleStage::ModuleStage(std::shared_ptr<torch::nn::Module> module, std::function<at::Tensor(const at::Tensor&)> forward,
                         std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss)
    : hooks_(hooksOf(std::move(module))) {
  hooks_.forward = std::move(forward);
  hooks_.loss = std::move(loss);
}

ModuleHooks ModuleStage::hooksOf(std::shared_ptr<torch::nn::Module> module) {
  ModuleHooks hooks;
  hooks.train = [module](bool on) { module->train(on); };
  hooks.parameters = [module] {
    NamedTensors out;
    for (const auto& item : module->named_parameters()) out.emplace_back(item.key(), item.value());
    return out;
  };
  hooks.buffers = [module] {
    NamedTensors out;
    for (const auto& item : module->named_buffers()) out.emplace_back(item.key(), item.value());
    return out;
  };
  return hooks;
}

void ModuleStage::setTargets(const at::Tensor& targets) {
  if (hooks_.setTargets) hooks_.setTargets(targets);
}

at::Tensor ModuleStage::generate(const at::Tensor& input, int maxTokens) {
  if (!hooks_.generate) return Stage::generate(input, maxTokens);
  torch::NoGradGuard noGrad;
  hooks_.train(false);
  at::Tensor out = hooks_.generate(input, maxTokens);
  hooks_.train(true);
  return out;
}

std::vector<std::string> ModuleStage::adopt(const std::function<at::Tensor(const std::string&)>& find) {
  return hooks_.adopt ? hooks_.adopt(find) : std::vector<std::string>{};
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
  {
    AutocastScope precision(autocast_);
    if (split_) {
      entry.weights = std::make_unique<WeightGradients>();
      SplitForwardScope scope(*entry.weights);
      entry.output = fp32(hooks_.forward(x));
    } else {
      entry.output = fp32(hooks_.forward(x));
    }
  }
  if (hooks_.ownLoss) {
    entry.ownLoss = hooks_.ownLoss();
    entry.ownLossFactor = ownLossFactor_;
  }
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
  const at::Tensor grad = gradOutput.to(entry.output.device(), entry.output.scalar_type());
  if (entry.ownLoss.defined() && entry.ownLoss.requires_grad()) {  // one pass for both losses
    torch::autograd::backward({entry.output, entry.ownLoss},
                              {grad, torch::full_like(entry.ownLoss, entry.ownLossFactor)});
  } else {
    torch::autograd::backward({entry.output}, {grad});
  }
  if (entry.weights) pendingWeights_.emplace(microBatch, std::move(entry.weights));
  return entry.input.defined() ? entry.input.grad() : at::Tensor();
}

void ModuleStage::backwardWeights(int microBatch) {
  auto it = pendingWeights_.find(microBatch);
  if (it == pendingWeights_.end()) return;  // nothing deferred (no split, or nothing trains)
  it->second->apply();
  pendingWeights_.erase(it);
}

at::Tensor ModuleStage::infer(const at::Tensor& input) {
  torch::NoGradGuard noGrad;
  hooks_.train(false);
  AutocastScope precision(autocast_);
  at::Tensor out = fp32(hooks_.forward(input));
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
