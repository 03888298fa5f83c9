#include "stages/recompute.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "scheduler/error.h"
#include "stages/precision.h"
#include "stages/split_backward.h"

namespace skytrain::stages {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor cpuRngState() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void setCpuRngState(const at::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

struct Recompute : torch::autograd::Function<Recompute> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t block, bool replayRng) {
    ctx->saved_data["block"] = block;
    ctx->saved_data["sink"] = SplitForwardScope::current();
    ctx->saved_data["autocast"] = static_cast<int64_t>(AutocastScope::current());
    if (replayRng) ctx->saved_data["rng"] = cpuRngState();
    ctx->save_for_backward({x});
    torch::NoGradGuard noGrad;
    return (*reinterpret_cast<const BlockFunction*>(block))(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(ctx->needs_input_grad(0));
    const auto& block = *reinterpret_cast<const BlockFunction*>(ctx->saved_data["block"].toInt());
    at::Tensor y;
    {
      torch::AutoGradMode grad(true);
      SplitForwardScope sink(ctx->saved_data["sink"].toInt());
      AutocastScope precision(static_cast<Autocast>(ctx->saved_data["autocast"].toInt()));
      if (ctx->saved_data.count("rng")) {
        // The replay draws what the first run drew; the stream then goes on where it was.
        const at::Tensor now = cpuRngState();
        setCpuRngState(ctx->saved_data["rng"].toTensor());
        y = block(x);
        setCpuRngState(now);
      } else {
        y = block(x);
      }
    }
    torch::autograd::backward({y}, {grads[0]});
    return {x.requires_grad() ? x.grad() : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor recomputed(const BlockFunction& block, const at::Tensor& x, bool replayRng) {
  if (!torch::GradMode::is_enabled()) return block(x);
  return Recompute::apply(x, reinterpret_cast<int64_t>(&block), replayRng);
}

}  // namespace skytrain::stages
