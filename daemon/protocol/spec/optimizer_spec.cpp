#include "daemon/protocol/spec/optimizer_spec.h"

#include <algorithm>
#include <cmath>

#include "scheduler/error.h"

namespace skytrain::protocol {
namespace {

using nlohmann::json;
constexpr int64_t kBig = 1 << 30;

LossScaleSpec parseLossScale(const json& j, const std::string& path) {
  LossScaleSpec s;
  if (j.is_string() && (j == "none" || j == "dynamic")) {
    s.dynamic = j == "dynamic";
    return s;
  }
  if (!j.is_object()) {
    throw SpecError(path, "expected \"none\", \"dynamic\" or {\"init\": 2^k, \"growth_interval\": n}, got " + describe(j));
  }
  ObjectReader r(j, path);
  s.dynamic = true;
  s.init = r.number("init", s.init, 1.0, std::ldexp(1.0, 127));
  // A power of two, so scaling and unscaling change no digit of any gradient.
  if (int exponent = 0; std::frexp(s.init, &exponent) != 0.5) {
    throw SpecError(r.pathOf("init"), "must be a power of two (2^0 .. 2^127), got " + describe(json(s.init)));
  }
  s.growthInterval = static_cast<int>(r.integer("growth_interval", s.growthInterval, 1, 1000000));
  r.finish();
  return s;
}

OptimizerSpec parseSection(ObjectReader r, int steps, const std::string& precision) {
  OptimizerSpec o;
  const std::string kind = r.string("kind", "adamw");
  if (kind != "adamw") throw SpecError(r.pathOf("kind"), "unknown optimizer \"" + kind + "\" (valid: adamw)");
  o.lr = r.number("lr", o.lr, 0.0, 10.0);
  o.beta1 = r.number("beta1", o.beta1, 0.0, 0.999999);
  o.beta2 = r.number("beta2", o.beta2, 0.0, 0.999999);
  o.eps = r.number("eps", o.eps, 1e-12, 1.0);
  o.weightDecay = r.number("weight_decay", o.weightDecay, 0.0, 10.0);
  if (r.has("no_decay")) {
    o.noDecay = r.strings("no_decay", std::nullopt);
    if (o.noDecay->size() > kMaxNoDecayPatterns) {
      throw SpecError(r.pathOf("no_decay"), "more than " + std::to_string(kMaxNoDecayPatterns) + " patterns");
    }
  }
  o.schedule = r.string("schedule", o.schedule);
  if (o.schedule != "constant" && o.schedule != "cosine" && o.schedule != "linear") {
    throw SpecError(r.pathOf("schedule"), "unknown schedule \"" + o.schedule + "\" (valid: constant, cosine, linear)");
  }
  o.warmupSteps = static_cast<int>(r.integer("warmup_steps", defaultWarmupSteps(steps), 0, kBig));
  o.minLr = r.number("min_lr", o.minLr, 0.0, 10.0);
  if (o.minLr > o.lr) throw SpecError(r.pathOf("min_lr"), "is above lr");
  o.clipNorm = r.number("clip_norm", o.clipNorm, 0.0, 1e9);
  o.zero = static_cast<int>(r.integer("zero", o.zero, 0, 1));
  o.onNonfinite = r.string("on_nonfinite", o.onNonfinite);
  if (o.onNonfinite != "fail" && o.onNonfinite != "skip") {
    throw SpecError(r.pathOf("on_nonfinite"), "\"" + o.onNonfinite + "\" is not fail or skip");
  }
  if (const json* s = r.child("loss_scale", false)) {
    o.lossScale = parseLossScale(*s, r.pathOf("loss_scale"));
  } else {
    o.lossScale.dynamic = precision == "fp16";  // fp16 gradients underflow without it
  }
  r.finish();
  return o;
}

}  // namespace

OptimizerSpec parseOptimizer(const json* section, int steps, const std::string& precision) {
  if (section) return parseSection(ObjectReader(*section, "$.optimizer"), steps, precision);
  OptimizerSpec o;
  o.warmupSteps = defaultWarmupSteps(steps);
  o.lossScale.dynamic = precision == "fp16";
  return o;
}

// fp16 autocast runs on CUDA devices only (LibTorch's CPU autocast is bf16); dynamic loss
// scaling needs every stage to agree on a step's skip before the next step's loss is taken.
void checkPrecision(const JobSpec& spec) {
  if (spec.precision == "fp16") {
    for (size_t i = 0; i < spec.stages.size(); ++i) {
      std::vector<std::string> devices{spec.stages[i].device};
      for (const auto& copy : spec.stages[i].replicas) devices.push_back(copy.device);
      for (const auto& device : devices) {
        if (device.rfind("cuda", 0) != 0) {
          throw SpecError("$.precision", "fp16 computes on CUDA devices only, and stage " + std::to_string(i) +
                                             " has a copy on " + device + " (use bf16 on CPUs)");
        }
      }
    }
  }
  if (!spec.optimizer.lossScale.dynamic) return;
  if (spec.update != "sync") {
    throw SpecError("$.optimizer.loss_scale", "dynamic loss scaling with the delayed update is not built: a step's "
                                              "loss is taken before the previous step's overflow is known (use update \"sync\")");
  }
  if (isFanIn(spec)) {
    throw SpecError("$.optimizer.loss_scale", "dynamic loss scaling is not built for a fan-in (" + spec.model.kind + ")");
  }
}

int defaultWarmupSteps(int steps) { return std::min(2000, steps / 20); }

double learningRate(const OptimizerSpec& o, int64_t step, int64_t totalSteps) {
  if (step < o.warmupSteps) return o.lr * static_cast<double>(step + 1) / o.warmupSteps;
  if (o.schedule == "constant") return o.lr;
  const double span = static_cast<double>(std::max<int64_t>(1, totalSteps - 1 - o.warmupSteps));
  const double progress = std::min(1.0, static_cast<double>(step - o.warmupSteps) / span);
  const double shape = o.schedule == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return o.minLr + (o.lr - o.minLr) * shape;
}

}  // namespace skytrain::protocol
