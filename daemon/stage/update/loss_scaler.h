// LossScaler: dynamic loss scaling (protocol::LossScaleSpec) on one stage, as
// torch.amp.GradScaler does in one process. The last stage multiplies each loss by scale();
// every stage divides its gradients by it (unscale) before the global norm is taken. Every
// stage keeps its own scaler and they stay equal: each learns the same global norm, so each
// skips the same steps (finite() false) and halves or doubles its scale at the same step.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "daemon/protocol/spec/job_spec.h"
#include "daemon/stage/update/gradient_checks.h"

namespace skytrain::daemon {

class SnapshotReader;

class LossScaler {
 public:
  explicit LossScaler(const protocol::LossScaleSpec& spec);

  bool enabled() const { return spec_.dynamic; }
  // What the loss is multiplied by: a power of two (1 when off).
  double scale() const { return scale_; }

  // Divides every gradient by the scale, in place; exact, the scale being a power of two.
  void unscale(const NamedGradients& gradients) const;
  // After a step's global norm is known. Finite: a good step (the scale doubles after
  // growth_interval of them in a row). Not finite: halves the scale and returns true, or
  // returns false where the scale is already 1 — the overflow is the model's, not the scale's.
  bool overflowed();
  void stepped();

  // For checkpoints: "loss_scale/scale" (float32) and "loss_scale/good_steps" (int64), only
  // when enabled; restoreState checks what it reads (a crafted scale would scale every loss).
  void saveState(std::vector<std::pair<std::string, at::Tensor>>& out) const;
  void restoreState(SnapshotReader& snapshot);

 private:
  protocol::LossScaleSpec spec_;
  double scale_;
  int64_t goodSteps_ = 0;
};

// "2^16": a scale as people read it.
std::string describeScale(double scale);

}  // namespace skytrain::daemon
