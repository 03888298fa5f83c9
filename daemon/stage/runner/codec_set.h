// CodecSet: the codecs one stage encodes with — a steady pair (forward to the next stage,
// backward to the previous), the warm-up pair of the spec's first steps, and validation's
// own stream — and what a plan's "auto" choice replaces. Each codec is one stream's: codecs
// keep state (error feedback, "+pred" tables), saved in checkpoints.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compression/codec.h"
#include "daemon/protocol/spec/job_spec.h"

namespace skytrain::daemon {

class SnapshotReader;

struct CodecPair {
  std::unique_ptr<compression::Codec> forward;
  std::unique_ptr<compression::Codec> backward;
};

class CodecSet {
 public:
  // "auto" directions start uncompressed; a plan names their codecs (applyPlan).
  explicit CodecSet(const protocol::CompressionSpec& spec);

  // The pair step `step` encodes with: the warm-up pair for the spec's warmup_steps.
  CodecPair& forStep(uint64_t step);
  // Validation's stream: made from the steady forward spec at the start, so validation
  // never touches training's residuals.
  compression::Codec& eval() { return *eval_; }
  compression::Codec& steadyForward() { return *steady_.forward; }

  // A plan's codecs for the "auto" directions replace the steady ones (fresh state: the
  // residual of one codec means nothing to another). Throws skytrain::Error on an unknown
  // spec, before that direction changes.
  void applyPlan(const std::string& forward, const std::string& backward);
  const std::string& forwardSpec() const { return steadyForward_; }
  const std::string& backwardSpec() const { return steadyBackward_; }

  // Every codec's state as "codec/<role>/<name>" tensors, and its restoration from them.
  void saveState(std::vector<std::pair<std::string, at::Tensor>>& out) const;
  void loadState(SnapshotReader& snapshot);

 private:
  std::vector<std::pair<const char*, compression::Codec*>> roles() const;

  protocol::CompressionSpec spec_;
  CodecPair steady_;
  CodecPair warmup_;
  std::unique_ptr<compression::Codec> eval_;
  std::string steadyForward_, steadyBackward_;  // the specs steady_ was made from
};

}  // namespace skytrain::daemon
