#include "stages/precision.h"

#include <ATen/autocast_mode.h>

namespace skytrain::stages {

AutocastScope::AutocastScope(bool bf16) : engaged_(bf16) {
  if (!engaged_) return;
  cpuBefore_ = at::autocast::is_cpu_enabled();
  cudaBefore_ = at::autocast::is_enabled();
  at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  at::autocast::set_cpu_enabled(true);
  at::autocast::set_enabled(true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!engaged_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_cpu_enabled(cpuBefore_);
  at::autocast::set_enabled(cudaBefore_);
}

bool AutocastScope::active() {
  return at::autocast::is_cpu_enabled() && at::autocast::get_autocast_cpu_dtype() == at::kBFloat16;
}

}  // namespace skytrain::stages
