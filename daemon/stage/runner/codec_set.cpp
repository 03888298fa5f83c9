#include "daemon/stage/runner/codec_set.h"

#include <torch/torch.h>

#include "compression/codec_registry.h"
#include "daemon/stage/state/snapshot_reader.h"

namespace skytrain::daemon {

CodecSet::CodecSet(const protocol::CompressionSpec& spec) : spec_(spec) {
  const auto& codecs = compression::builtinCodecs();
  steadyForward_ = spec.forward == "auto" ? "none" : spec.forward;
  steadyBackward_ = spec.backward == "auto" ? "none" : spec.backward;
  steady_ = {codecs.make(steadyForward_), codecs.make(steadyBackward_)};
  warmup_ = {codecs.make(spec.warmup), codecs.make(spec.warmup)};
  eval_ = codecs.make(steadyForward_);
}

CodecPair& CodecSet::forStep(uint64_t step) {
  return static_cast<int64_t>(step) < spec_.warmupSteps ? warmup_ : steady_;
}

void CodecSet::applyPlan(const std::string& forward, const std::string& backward) {
  const auto& registry = compression::builtinCodecs();
  if (spec_.forward == "auto" && !forward.empty() && forward != steadyForward_) {
    steady_.forward = registry.make(forward);  // throws on an unknown spec, before anything changes
    steadyForward_ = forward;
  }
  if (spec_.backward == "auto" && !backward.empty() && backward != steadyBackward_) {
    steady_.backward = registry.make(backward);
    steadyBackward_ = backward;
  }
}

std::vector<std::pair<const char*, compression::Codec*>> CodecSet::roles() const {
  return {{"steady.forward", steady_.forward.get()}, {"steady.backward", steady_.backward.get()},
          {"warmup.forward", warmup_.forward.get()}, {"warmup.backward", warmup_.backward.get()},
          {"eval", eval_.get()}};
}

void CodecSet::saveState(std::vector<std::pair<std::string, at::Tensor>>& out) const {
  for (const auto& [role, codec] : roles()) {
    for (const auto& [name, tensor] : codec->state()) out.emplace_back(std::string("codec/") + role + "/" + name, tensor.clone());
  }
}

void CodecSet::loadState(SnapshotReader& snapshot) {
  for (const auto& [role, codec] : roles()) codec->loadState(snapshot.takeUnder(std::string("codec/") + role + "/"));
}

}  // namespace skytrain::daemon
