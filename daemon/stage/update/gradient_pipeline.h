// GradientPipeline: what happens to a step's gradients between the last backward and the
// optimizer — averaged over the stage's copies, checked for NaN and Inf, and clipped by the
// global norm, which the stages agree on by passing per-parameter norms up the pipeline and
// the total back down (as clip_grad_norm_ does in one process). Under dynamic loss scaling
// they are first divided by the loss scale, and an overflow skips the step on every stage. The synchronous update does
// it all at once (finish); the delayed update starts it when a step's last backward ends
// (begin) and learns the total among later frames (resolveTotal, check).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "daemon/stage/update/gradient_checks.h"
#include "daemon/stage/update/loss_scaler.h"
#include "daemon/stage/runner/stage_context.h"
#include "stages/models/model_source.h"
#include "stages/stage.h"

namespace skytrain::compression {
class Codec;
}

namespace skytrain::daemon {

class ReplicaGroup;
class StageLinks;

// A step's gradient on its way to the optimizer.
struct PendingGradient {
  uint64_t step = 0;
  at::Tensor total;        // the global gradient norm; undefined until known
  bool needsTotal = true;  // false: no clipping and nothing to skip (checked locally)
};

class GradientPipeline {
 public:
  // `ownNorm`: the stage clips by its own gradients' norm (a fan-in's stages train
  // separate models); otherwise by the norm over the whole chain.
  GradientPipeline(const StageContext& context, StepCounters& counters, StageLinks& links, bool ownNorm);
  ~GradientPipeline();

  // The stage's copies (R > 1): gradients are averaged over them before anything else.
  void setReplicaGroup(std::unique_ptr<ReplicaGroup> group);
  // Matrices two stages hold a copy of (ModelSource::tied): each step the first holder's
  // gradient travels down the chain to the second, which adds its own and sends the sum
  // back up; both copies take the sum, so they stay bit-identical (Megatron's embedding
  // group, over the pipeline's own links). The second copy is left out of the global norm,
  // as one process counts a shared parameter once. Where the job's backward codec is bf16 or
  // fp16 (what bf16 and fp16 jobs default to), the gradients cross in it; the second holder
  // takes the rounded sum it sends, so both copies still take the same.
  void setTied(std::vector<stages::TiedPair> tied) { tied_ = std::move(tied); }
  ReplicaGroup* replicas() const { return replicas_.get(); }
  // The codec the tied gradients cross in under `spec`: its backward codec where that is bf16
  // or fp16, else "none".
  static std::string tiedCodecSpec(const protocol::JobSpec& spec);
  // The loss scale the last stage multiplies its losses by (1 without loss scaling), and
  // the scaler's state for checkpoints.
  double lossScale() const { return scaler_.scale(); }
  LossScaler& lossScaler() { return scaler_; }

  // The parameters of `stage` that hold a gradient, by name (views of the gradients).
  static NamedGradients gradients(const stages::Stage& stage);

  // The synchronous update, after step's last backward on `model`: average, check, clip.
  // False: skip this step's update (on_nonfinite "skip"; every stage sees the same total).
  bool finish(uint64_t step, const stages::Stage& model);

  // The delayed update, when step's last backward on `copy` ends: averages, then sends the
  // norms upstream (joined to the later stages'); the first stage takes the total and sends
  // it down.
  PendingGradient begin(uint64_t step, const stages::Stage& copy);
  // The total of a pending gradient from the previous stage, passed on down.
  void resolveTotal(PendingGradient& pending);
  // Before a pending gradient is applied: the non-finite policy and clipping. False: skip.
  bool check(const PendingGradient& pending, const NamedGradients& named);

 private:
  void average(const NamedGradients& named);
  // The synchronous exchange of every tied matrix's gradient of `step` (setTied).
  void sumTied(uint64_t step, const stages::Stage& model);
  // `named` without the copies the global norm must not count twice.
  NamedGradients forNorm(const NamedGradients& named) const;
  // Throws a kNonFinite failure naming the first gradient that holds NaN or Inf.
  void failIfNonFinite(const NamedGradients& named, uint64_t step) const;
  // This stage's per-parameter norms joined to the next stage's (sent up from the last).
  at::Tensor normsFromBelow(uint64_t step, const at::Tensor& mine);
  // The global norm: norms go up, the first stage takes their norm and sends it down.
  at::Tensor exchangeNorms(uint64_t step, const at::Tensor& mine);
  // The total of `step` from the previous stage (NormDown); refuses a negative one.
  at::Tensor receiveTotal(uint64_t step);
  // Whether a step needs a total at all: clipping, or the skip policy.
  bool needsTotal() const;

  const StageContext& context_;
  StepCounters& counters_;
  StageLinks& links_;
  bool ownNorm_;
  std::unique_ptr<ReplicaGroup> replicas_;  // null: a single copy
  std::vector<stages::TiedPair> tied_;
  LossScaler scaler_;
};

}  // namespace skytrain::daemon
