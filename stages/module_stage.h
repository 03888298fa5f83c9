// ModuleStage: a Stage over any module with a tensor -> tensor forward, reached through
// hooks, so torch::nn modules (the zoo) and TorchScript modules share one implementation of
// the micro-batch stash and the autograd hand-off.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include "stages/split_backward.h"
#include "stages/stage.h"

namespace torch::nn {
class Module;
}

namespace skytrain::stages {

struct ModuleHooks {
  std::function<at::Tensor(const at::Tensor&)> forward;
  std::function<void(bool)> train;             // training mode on or off (dropout)
  std::function<NamedTensors()> parameters;    // named, in a fixed order
  std::function<NamedTensors()> buffers;
  // The last stage's loss of (output, targets); empty: Stage's cross-entropy.
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss;
  // Optional: Stage's setTargets, setTokens, codeShares, takeSenderLosses, generate and adopt
  // (empty: the defaults).
  std::function<void(const at::Tensor&)> setTargets;
  std::function<void(const at::Tensor&)> setTokens;
  std::function<std::map<int, double>()> codeShares;
  std::function<std::map<int, double>()> takeSenderLosses;
  // Stage::hasOwnLoss when set: the stage's own loss of its last forward that trained, taken
  // (a second call returns an undefined tensor, as does a forward without one).
  std::function<at::Tensor()> ownLoss;
  std::function<at::Tensor(const at::Tensor&, int)> generate;
  std::function<std::vector<std::string>(const std::function<at::Tensor(const std::string&)>&)> adopt;
};

class ModuleStage : public Stage {
 public:
  explicit ModuleStage(ModuleHooks hooks);
  // A torch::nn module, its forward, and optionally its loss.
  ModuleStage(std::shared_ptr<torch::nn::Module> module, std::function<at::Tensor(const at::Tensor&)> forward,
              std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss = {});
  // The hooks of a torch::nn module: train, parameters and buffers (the rest left empty).
  static ModuleHooks hooksOf(std::shared_ptr<torch::nn::Module> module);

  at::Tensor forward(int microBatch, const at::Tensor& input) override;
  at::Tensor backward(int microBatch, const at::Tensor& gradOutput) override;
  at::Tensor infer(const at::Tensor& input) override;
  at::Tensor loss(const at::Tensor& output, const at::Tensor& targets) override;
  std::vector<at::Tensor> parameters() const override;
  NamedTensors namedParameters() const override { return hooks_.parameters(); }
  NamedTensors stateDict() const override;
  size_t inFlight() const override { return stash_.size() + pendingWeights_.size(); }
  bool setSplitBackward(bool on) override {
    split_ = on;
    return true;
  }
  void backwardWeights(int microBatch) override;
  bool setAutocast(Autocast type) override {
    autocast_ = type;
    return true;
  }
  void setTargets(const at::Tensor& targets) override;
  void setTokens(const at::Tensor& ids) override {
    if (hooks_.setTokens) hooks_.setTokens(ids);
  }
  bool hasOwnLoss() const override { return static_cast<bool>(hooks_.ownLoss); }
  void setOwnLossFactor(double factor) override { ownLossFactor_ = factor; }
  std::map<int, double> takeSenderLosses() override {
    return hooks_.takeSenderLosses ? hooks_.takeSenderLosses() : Stage::takeSenderLosses();
  }
  std::map<int, double> codeShares() const override { return hooks_.codeShares ? hooks_.codeShares() : Stage::codeShares(); }
  at::Tensor generate(const at::Tensor& input, int maxTokens) override;
  std::vector<std::string> adopt(const std::function<at::Tensor(const std::string&)>& find) override;

 private:
  struct Stashed {
    at::Tensor input;   // leaf that collects the input gradient (undefined for ids)
    at::Tensor output;
    at::Tensor ownLoss;  // hasOwnLoss: this forward's, and the factor backward seeds it with
    double ownLossFactor = 1.0;
    std::unique_ptr<WeightGradients> weights;  // under the split: what backward defers
  };
  ModuleHooks hooks_;
  std::map<int, Stashed> stash_;
  bool split_ = false;
  Autocast autocast_ = Autocast::Off;
  double ownLossFactor_ = 1.0;
  std::map<int, std::unique_ptr<WeightGradients>> pendingWeights_;  // backward done, W not yet
};

}  // namespace skytrain::stages
