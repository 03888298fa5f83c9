// The zero-bubble split of a stage's backward (ZB-H1, Qi et al. 2023): a linear layer's
// weight gradient (dW = dy^T x, db = sum dy), about half its backward's work, waits for a
// later "W" pass while the input gradient goes upstream at once, so the W pass can fill the
// time a stage would spend waiting for a frame.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace torch::nn {
class LinearImpl;
}

namespace skytrain::stages {

// One micro-batch's deferred weight gradients: what its backward left for the W pass.
class WeightGradients {
 public:
  WeightGradients();
  ~WeightGradients();
  WeightGradients(const WeightGradients&) = delete;
  WeightGradients& operator=(const WeightGradients&) = delete;

  // Accumulates every deferred gradient into its parameter's .grad, in the order the
  // backward produced them, and forgets them.
  void apply();
  bool empty() const { return entries_.empty(); }
  // The key a split forward records (SplitForwardScope).
  int64_t key() const { return key_; }

  struct Entry {
    at::Tensor input;       // the layer's input x
    at::Tensor gradOutput;  // dy
    at::Tensor weight;      // the parameters themselves
    at::Tensor bias;        // undefined without a bias
  };
  void add(Entry entry) { entries_.push_back(std::move(entry)); }

 private:
  int64_t key_;
  std::vector<Entry> entries_;
};

// While alive, linear layers on this thread (stages::linear) record their weight gradients'
// inputs for `sink` instead of computing them in the backward. The backward may run on
// another thread (a CUDA device's): it finds the sink by key, and computes the gradients
// at once when the sink is gone.
class SplitForwardScope {
 public:
  explicit SplitForwardScope(const WeightGradients& sink);
  // By key: activation recompute replays a forward, inside the backward, under the sink its
  // first run had (0: none).
  explicit SplitForwardScope(int64_t key);
  ~SplitForwardScope();
  // The sink open on this thread; 0: none.
  static int64_t current();

 private:
  int64_t previous_;
};

// A linear layer's forward: layer->forward(x), or inside a SplitForwardScope the same
// product through a function whose backward defers the weight gradient (not under bf16
// autocast: there the layer's weight gradient comes in its backward, as without the split).
at::Tensor linear(torch::nn::LinearImpl& layer, const at::Tensor& x);

}  // namespace skytrain::stages
