#include "daemon/stage/update/loss_scaler.h"

#include <torch/torch.h>

#include <cmath>

#include "daemon/stage/state/snapshot_reader.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

constexpr int kMaxExponent = 127;  // the largest power of two a float holds

bool isScale(double value) {
  int exponent = 0;
  return std::isfinite(value) && std::frexp(value, &exponent) == 0.5 && exponent >= 1 && exponent <= kMaxExponent + 1;
}

}  // namespace

std::string describeScale(double scale) {
  int exponent = 0;
  std::frexp(scale, &exponent);
  return "2^" + std::to_string(exponent - 1);
}

LossScaler::LossScaler(const protocol::LossScaleSpec& spec) : spec_(spec), scale_(spec.dynamic ? spec.init : 1.0) {}

void LossScaler::unscale(const NamedGradients& gradients) const {
  if (!enabled() || scale_ == 1.0) return;
  const double inverse = 1.0 / scale_;
  for (const auto& entry : gradients) {
    at::Tensor gradient = entry.second;  // shares the storage: scaled in place
    gradient.mul_(inverse);
  }
}

bool LossScaler::overflowed() {
  goodSteps_ = 0;
  if (scale_ <= 1.0) return false;
  scale_ /= 2;
  return true;
}

void LossScaler::stepped() {
  if (++goodSteps_ < spec_.growthInterval) return;
  goodSteps_ = 0;
  if (scale_ < std::ldexp(1.0, kMaxExponent)) scale_ *= 2;
}

void LossScaler::saveState(std::vector<std::pair<std::string, at::Tensor>>& out) const {
  if (!enabled()) return;
  // float32, as checkpoints hold (safetensors has no float64 here): every scale is a power of
  // two within a float's range, so it is exact.
  out.emplace_back("loss_scale/scale", torch::tensor(static_cast<float>(scale_), torch::kFloat));
  out.emplace_back("loss_scale/good_steps", torch::tensor(goodSteps_, torch::kLong));
}

void LossScaler::restoreState(SnapshotReader& snapshot) {
  if (!enabled()) return;
  const auto scale = snapshot.take("loss_scale/scale", torch::tensor(0.0f, torch::kFloat));
  const auto good = snapshot.take("loss_scale/good_steps", torch::tensor(int64_t{0}, torch::kLong));
  if (!scale || !good) throw WireError(snapshot.where() + ": the loss scale is missing (the job scales its loss)");
  const double value = scale->item<double>();
  const int64_t steps = good->item<int64_t>();
  if (!isScale(value)) {
    throw WireError(snapshot.where() + ": loss scale " + std::to_string(value) + " is not a power of two in 2^0..2^127");
  }
  if (steps < 0 || steps >= spec_.growthInterval) {
    throw WireError(snapshot.where() + ": " + std::to_string(steps) + " good steps is outside 0.." +
                    std::to_string(spec_.growthInterval - 1));
  }
  scale_ = value;
  goodSteps_ = steps;
}

}  // namespace skytrain::daemon
