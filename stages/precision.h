// Mixed precision: the scope inside which a stage's forward runs in a 16-bit type under
// autocast (matrix products in bf16 or fp16, reductions and norms in fp32), with the
// weights, their gradients and AdamW's state kept in fp32. bf16 runs on CPU and CUDA; fp16
// on CUDA only (its narrow range needs the loss scaling of daemon/stage/update/loss_scaler.h).
#pragma once

#include <string>

namespace skytrain::stages {

enum class Autocast { Off = 0, BFloat16 = 1, Float16 = 2 };

// A job's `precision` ("fp32", "bf16", "fp16") as the autocast its stages run under.
Autocast autocastFor(const std::string& precision);

// While alive, autocast to `type` on this thread (Off: nothing changes); restores the state
// before it on destruction, dropping autocast's cast-weight cache at the outermost.
class AutocastScope {
 public:
  explicit AutocastScope(Autocast type);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;
  // The autocast on this thread now (a recompute replays under the same).
  static Autocast current();

 private:
  Autocast type_;
  bool cpuBefore_ = false;
  bool cudaBefore_ = false;
};

}  // namespace skytrain::stages
