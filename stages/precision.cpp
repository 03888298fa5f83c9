#include "stages/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "scheduler/error.h"

namespace skytrain::stages {
namespace {

// LibTorch 2.4 replaced the per-device autocast calls by ones taking the device type; the
// old names are gone in later releases.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool enabledOn(at::DeviceType device) { return at::autocast::is_autocast_enabled(device); }
void enable(at::DeviceType device, bool on) { at::autocast::set_autocast_enabled(device, on); }
at::ScalarType dtypeOn(at::DeviceType device) { return at::autocast::get_autocast_dtype(device); }
void setDtype(at::DeviceType device, at::ScalarType type) { at::autocast::set_autocast_dtype(device, type); }
#else
bool enabledOn(at::DeviceType device) {
  return device == at::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
void enable(at::DeviceType device, bool on) {
  device == at::kCPU ? at::autocast::set_cpu_enabled(on) : at::autocast::set_enabled(on);
}
at::ScalarType dtypeOn(at::DeviceType device) {
  return device == at::kCPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
}
void setDtype(at::DeviceType device, at::ScalarType type) {
  device == at::kCPU ? at::autocast::set_autocast_cpu_dtype(type) : at::autocast::set_autocast_gpu_dtype(type);
}
#endif

}  // namespace

Autocast autocastFor(const std::string& precision) {
  if (precision == "fp32") return Autocast::Off;
  if (precision == "bf16") return Autocast::BFloat16;
  if (precision == "fp16") return Autocast::Float16;
  throw Error("unknown precision \"" + precision + "\"");
}

AutocastScope::AutocastScope(Autocast type) : type_(type) {
  if (type_ == Autocast::Off) return;
  cpuBefore_ = enabledOn(at::kCPU);
  cudaBefore_ = enabledOn(at::kCUDA);
  if (type_ == Autocast::BFloat16) {
    setDtype(at::kCPU, at::kBFloat16);
    setDtype(at::kCUDA, at::kBFloat16);
    enable(at::kCPU, true);
  } else {
    setDtype(at::kCUDA, at::kHalf);  // CPU ops (none of a CUDA stage's products) stay fp32
  }
  enable(at::kCUDA, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (type_ == Autocast::Off) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  enable(at::kCPU, cpuBefore_);
  enable(at::kCUDA, cudaBefore_);
}

Autocast AutocastScope::current() {
  if (enabledOn(at::kCUDA) && dtypeOn(at::kCUDA) == at::kHalf) return Autocast::Float16;
  if (enabledOn(at::kCPU) && dtypeOn(at::kCPU) == at::kBFloat16) return Autocast::BFloat16;
  return Autocast::Off;
}

}  // namespace skytrain::stages
