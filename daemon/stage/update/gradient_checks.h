// The arithmetic GradientPipeline (gradient_pipeline.h) does on a step's gradients, for the
// synchronous and the delayed update alike: find a non-finite one, take their norms, clip
// them by the global norm.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace skytrain::daemon {

using NamedGradients = std::vector<std::pair<std::string, at::Tensor>>;

// "the gradient of NAME at step S (stage K)" for the first gradient holding NaN or Inf;
// empty when every one is finite.
std::string nonFiniteGradient(const NamedGradients& gradients, uint64_t step, int stage);

// Each gradient's L2 norm, stacked as float32 [k] on the CPU ([0] when there are none).
at::Tensor gradientNorms(const NamedGradients& gradients);

// Scales every gradient in place by min(1, clipNorm / (total + 1e-6)), as clip_grad_norm_.
void clipGradients(const NamedGradients& gradients, double clipNorm, const at::Tensor& total);

// Zeroes the parameters' gradients as Optimizer::zero_grad does for its own: every one the
// stage trains, also those a ZeRO-1 copy's optimizer does not hold (their owner's does).
void zeroGradients(const std::vector<at::Tensor>& parameters);

}  // namespace skytrain::daemon
