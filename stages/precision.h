// Mixed precision: the scope inside which a stage's forward runs in bf16 (autocast on CPU and
// CUDA: matrix products in bf16, reductions and norms in fp32), with the weights, their
// gradients and AdamW's state kept in fp32.
#pragma once

namespace skytrain::stages {

// While alive, autocast to bf16 on this thread when `bf16` (else nothing changes); restores
// the state before it on destruction, dropping autocast's cast-weight cache at the outermost.
class AutocastScope {
 public:
  explicit AutocastScope(bool bf16);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;
  // Whether autocast to bf16 is on on this thread (a recompute replays under the same).
  static bool active();

 private:
  bool engaged_;
  bool cpuBefore_ = false;
  bool cudaBefore_ = false;
};

}  // namespace skytrain::stages
