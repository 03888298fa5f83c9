#include "stages/split_backward.h"

#include <torch/torch.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "stages/precision.h"

namespace skytrain::stages {
namespace {

// Live sinks by key: a backward on any thread finds its micro-batch's sink here.
std::mutex& registryMutex() {
  static std::mutex mutex;
  return mutex;
}
std::unordered_map<int64_t, WeightGradients*>& registry() {
  static std::unordered_map<int64_t, WeightGradients*> sinks;
  return sinks;
}
std::atomic<int64_t> nextKey{1};
thread_local int64_t tForwardSink = 0;  // 0: no split scope open on this thread

// dW = dy^T x and db = sum dy over every leading dimension, as nn::Linear's backward.
std::pair<at::Tensor, at::Tensor> weightGradients(const at::Tensor& x, const at::Tensor& dy, bool bias) {
  const at::Tensor dy2 = dy.reshape({-1, dy.size(-1)});
  at::Tensor dw = dy2.t().mm(x.reshape({-1, x.size(-1)}));
  return {std::move(dw), bias ? dy2.sum(0) : at::Tensor()};
}

void accumulate(const at::Tensor& parameter, at::Tensor gradient) {
  if (!parameter.defined() || !parameter.requires_grad() || !gradient.defined()) return;
  at::Tensor& grad = parameter.mutable_grad();
  if (grad.defined()) {
    grad.add_(gradient);
  } else {
    grad = std::move(gradient);
  }
}

// The layer's input gradient now; its weight gradient into the sink `key` when that sink is
// alive, else now as well (returned to autograd like nn::Linear's).
torch::autograd::variable_list deferredBackward(torch::autograd::AutogradContext* ctx, const at::Tensor& dy,
                                                bool hasBias) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  // One matrix product over all leading dimensions (matmul of a non-contiguous 3-d dy by a
  // matrix would go batch by batch).
  at::Tensor dx = ctx->needs_input_grad(0) ? dy.reshape({-1, dy.size(-1)}).mm(saved[1]).view(x.sizes()) : at::Tensor();
  const at::Tensor weight = ctx->saved_data["weight"].toTensor();
  const at::Tensor bias = hasBias ? ctx->saved_data["bias"].toTensor() : at::Tensor();
  torch::autograd::variable_list out{dx, at::Tensor()};
  if (hasBias) out.emplace_back();
  out.emplace_back();  // the sink's key
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    auto it = registry().find(ctx->saved_data["sink"].toInt());
    if (it != registry().end()) {
      it->second->add({x, dy, weight, bias});
      return out;
    }
  }
  auto [dw, db] = weightGradients(x, dy, hasBias);
  if (ctx->needs_input_grad(1)) out[1] = std::move(dw);
  if (hasBias && ctx->needs_input_grad(2)) out[2] = std::move(db);
  return out;
}

void saveForDeferral(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                     const at::Tensor& bias, int64_t sink) {
  ctx->save_for_backward({x, weight});
  // The parameters themselves (the same tensors, so the W pass reaches their .grad).
  ctx->saved_data["weight"] = weight;
  if (bias.defined()) ctx->saved_data["bias"] = bias;
  ctx->saved_data["sink"] = sink;
}

// LibTorch 1.13's custom functions take no undefined tensor inputs: a layer without a bias
// goes through its own function.
struct DeferredLinear : torch::autograd::Function<DeferredLinear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, int64_t sink) {
    saveForDeferral(ctx, x, weight, bias, sink);
    return at::linear(x, weight, bias);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return deferredBackward(ctx, grads[0], true);
  }
};

struct DeferredLinearNoBias : torch::autograd::Function<DeferredLinearNoBias> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            int64_t sink) {
    saveForDeferral(ctx, x, weight, at::Tensor(), sink);
    return at::linear(x, weight);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return deferredBackward(ctx, grads[0], false);
  }
};

}  // namespace

WeightGradients::WeightGradients() : key_(nextKey++) {
  std::lock_guard<std::mutex> lock(registryMutex());
  registry()[key_] = this;
}

WeightGradients::~WeightGradients() {
  std::lock_guard<std::mutex> lock(registryMutex());
  registry().erase(key_);
}

void WeightGradients::apply() {
  torch::NoGradGuard noGrad;
  for (Entry& e : entries_) {
    auto [dw, db] = weightGradients(e.input, e.gradOutput, e.bias.defined());
    accumulate(e.weight, std::move(dw));
    accumulate(e.bias, std::move(db));
  }
  entries_.clear();
}

SplitForwardScope::SplitForwardScope(const WeightGradients& sink) : previous_(tForwardSink) { tForwardSink = sink.key(); }

SplitForwardScope::SplitForwardScope(int64_t key) : previous_(tForwardSink) { tForwardSink = key; }

SplitForwardScope::~SplitForwardScope() { tForwardSink = previous_; }

int64_t SplitForwardScope::current() { return tForwardSink; }

at::Tensor linear(torch::nn::LinearImpl& layer, const at::Tensor& x) {
  // Under autocast the product goes through autocast's own casts, undeferred: the deferred
  // function would see fp32 weights against a 16-bit gradient.
  if (tForwardSink == 0 || !torch::GradMode::is_enabled() || AutocastScope::current() != Autocast::Off) {
    return layer.forward(x);
  }
  if (!layer.bias.defined()) return DeferredLinearNoBias::apply(x, layer.weight, tForwardSink);
  return DeferredLinear::apply(x, layer.weight, layer.bias, tForwardSink);
}

}  // namespace skytrain::stages
