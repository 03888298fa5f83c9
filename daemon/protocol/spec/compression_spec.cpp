#include "daemon/protocol/spec/compression_spec.h"

#include "compression/side_tokens.h"
#include "scheduler/error.h"

namespace skytrain::protocol {
namespace {

constexpr int64_t kMaxWarmupSteps = int64_t{1} << 30;  // the bound of every step count in a spec

}  // namespace

// "<inner>+pred" (compression/side_tokens.h) needs the token IDs at both ends of its link:
// only the first stage and the last hold them, so only a 2-stage chain's forward link.
void checkPredictive(const JobSpec& spec) {
  const auto& c = spec.compression;
  if (compression::needsTokens(c.backward)) throw SpecError("$.compression.backward", "\"+pred\" predicts activations from token IDs: forward only");
  if (compression::needsTokens(c.warmup)) throw SpecError("$.compression.warmup", "\"+pred\" is not a warm-up codec");
  for (const auto* list : {&c.allowed, &c.allowedForward, &c.allowedBackward}) {
    for (const auto& codec : *list) {
      if (compression::needsTokens(codec)) throw SpecError("$.compression", "\"" + codec + "\": \"auto\" does not choose \"+pred\"; name it as forward");
    }
  }
  if (!compression::needsTokens(c.forward)) return;
  const bool chainOfTokens = spec.model.kind == "gpt" || spec.model.kind == "encoder" || spec.model.kind == "classifier";
  if (!chainOfTokens || spec.stages.size() != 2) {
    throw SpecError("$.compression.forward", "\"" + c.forward +
                                                 "\" needs the token IDs at both ends of the link: a 2-stage gpt, encoder or "
                                                 "classifier job, whose first stage draws them and whose last draws them for its targets");
  }
}

CompressionSpec parseCompression(ObjectReader r) {
  CompressionSpec c;
  c.forward = r.string("forward", c.forward);
  c.backward = r.string("backward", c.backward);
  c.warmupSteps = static_cast<int>(r.integer("warmup_steps", c.warmupSteps, 0, kMaxWarmupSteps));
  c.warmup = r.string("warmup", c.warmup);
  // A list "auto" chooses from: 1..16 codec specs.
  auto codecList = [&r](const std::string& key, std::vector<std::string>& into) {
    if (!r.has(key)) return;
    into = r.strings(key, std::nullopt);
    if (into.empty() || into.size() > 16) throw SpecError(r.pathOf(key), "expected 1..16 codec specs");
    for (size_t i = 0; i < into.size(); ++i) {
      if (into[i].empty() || into[i].size() > 128 || into[i] == "auto") {
        throw SpecError(r.pathOf(key) + "[" + std::to_string(i) + "]", "must be a codec spec (not \"auto\")");
      }
    }
  };
  codecList("allowed", c.allowed);
  codecList("allowed_forward", c.allowedForward);
  codecList("allowed_backward", c.allowedBackward);
  if (c.warmup == "auto") throw SpecError(r.pathOf("warmup"), "the warm-up codec is fixed (\"auto\" is for forward and backward)");
  r.finish();
  return c;
}

}  // namespace skytrain::protocol
