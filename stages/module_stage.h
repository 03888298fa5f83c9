// ModuleStage: a Stage over any torch::nn::Module with a tensor -> tensor forward.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include "stages/stage.h"

namespace torch::nn {
class Module;
}

namespace skytrain::stages {

class ModuleStage : public Stage {
 public:
  using ForwardFn = std::function<at::Tensor(const at::Tensor&)>;

  ModuleStage(std::shared_ptr<torch::nn::Module> module, ForwardFn forward);

  at::Tensor forward(int microBatch, const at::Tensor& input) override;
  at::Tensor backward(int microBatch, const at::Tensor& gradOutput) override;
  at::Tensor infer(const at::Tensor& input) override;
  std::vector<at::Tensor> parameters() const override;
  NamedTensors stateDict() const override;
  size_t inFlight() const override { return stash_.size(); }

 private:
  struct Stashed {
    at::Tensor input;   // leaf that collects the input gradient (undefined for ids)
    at::Tensor output;
  };
  std::shared_ptr<torch::nn::Module> module_;
  ForwardFn forward_;
  std::map<int, Stashed> stash_;
};

}  // namespace skytrain::stages
