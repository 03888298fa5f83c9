#include "daemon/stage/update/gradient_checks.h"

#include <torch/torch.h>

namespace skytrain::daemon {

std::string nonFiniteGradient(const NamedGradients& gradients, uint64_t step, int stage) {
  for (const auto& [name, gradient] : gradients) {
    if (!torch::isfinite(gradient).all().item<bool>()) {
      return "the gradient of " + name + " at step " + std::to_string(step + 1) + " (stage " + std::to_string(stage) + ")";
    }
  }
  return "";
}

at::Tensor gradientNorms(const NamedGradients& gradients) {
  if (gradients.empty()) return torch::empty({0});
  std::vector<at::Tensor> norms;
  for (const auto& entry : gradients) norms.push_back(entry.second.norm(2.0));
  return torch::stack(norms).to(at::kCPU);
}

void clipGradients(const NamedGradients& gradients, double clipNorm, const at::Tensor& total) {
  const at::Tensor coefficient = torch::clamp(clipNorm / (total + 1e-6), c10::nullopt, 1.0);
  for (const auto& entry : gradients) {
    at::Tensor gradient = entry.second;  // shares the storage: scaled in place
    gradient.mul_(coefficient.to(gradient.device()));
  }
}

void zeroGradients(const std::vector<at::Tensor>& parameters) {
  for (auto p : parameters) {
    if (!p.mutable_grad().defined()) continue;
    p.mutable_grad().detach_();
    p.mutable_grad().zero_();
  }
}

}  // namespace skytrain::daemon
