// Activation recompute (model.recompute "block"): a block's forward runs without keeping its
// activations, and its backward runs that forward again — with the CPU RNG state, the
// autocast precision and the ZB-H1 weight-gradient sink the first run had — then
// back-propagates through the replay.
// Only each block's input stays stashed between a micro-batch's forward and its backward;
// the price is one more forward of every block in the backward.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace skytrain::stages {

using BlockFunction = std::function<at::Tensor(const at::Tensor&)>;

// block(x), its activations recomputed in the backward. `block` must outlive every autograd
// graph the result is part of (a model's own member does). `replayRng`: the block draws
// random numbers (dropout), so its replay restores the generator state the first run saw.
// Without grad mode, simply block(x).
at::Tensor recomputed(const BlockFunction& block, const at::Tensor& x, bool replayRng);

}  // namespace skytrain::stages
