// A stage's starting weights and what of it trains: init_from (a safetensors file, or a
// skytrain checkpoint's) and trainable patterns.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "stages/weights/safetensors.h"
#include "stages/stage.h"

namespace skytrain::stages {

// Freezes every parameter whose global name matches none of `patterns` (shell globs, where
// `*` also matches dots: "block3.*", "*.lora_*"); no patterns: everything trains. A frozen
// parameter gets no gradient and no optimizer state. Returns the element counts.
struct ParameterCounts {
  int64_t trainable = 0;
  int64_t frozen = 0;
};
ParameterCounts applyTrainable(Stage& stage, const std::vector<std::string>& patterns);
ParameterCounts countParameters(const Stage& stage);

// Weight decay's two groups of the trainable parameters, for AdamW's param groups. A name
// matching one of `noDecay` (shell globs, as for trainable) goes without decay; nullopt is
// the rule LLM recipes use (nanoGPT, Megatron, torchtitan): every parameter of fewer than
// two dimensions (biases, norm gains) and every name matching kDefaultNoDecay (embedding
// tables). `aliases` maps a name to the one it is judged as: the last stage's tied head
// is judged as the embedding it copies, so the two copies keep taking the same update.
inline const std::vector<std::string> kDefaultNoDecay = {"*emb*", "*wte*", "*wpe*"};
struct DecayGroups {
  std::vector<at::Tensor> decay, noDecay;
  std::vector<std::string> noDecayNames;
};
DecayGroups splitByDecay(const Stage& stage, const std::optional<std::vector<std::string>>& noDecay,
                         const std::map<std::string, std::string>& aliases = {});

// Copies into the stage every parameter and buffer the file holds under the same name (a
// skytrain checkpoint's "param/<name>" entries count as <name>; tensors of other stages are
// ignored), converting floating dtypes. Refused, with every mismatch listed: a tensor whose
// shape differs, a non-floating tensor for a floating parameter, and a frozen parameter the
// file lacks (it would stay random). A trainable one the file lacks keeps its initial value
// (a new head, an adapter) and is listed in the result. A split point's factors are set
// from the SVD of the unfactored layer the file holds (Stage::adopt). With a prefix
// ("encoder."), a parameter is also found under its name without it: a translation model's
// encoder loads a pretrained encoder's file. Throws skytrain::Error.
struct InitResult {
  int loaded = 0;
  std::vector<std::string> fromSeed;  // trainable parameters not in the file
};
InitResult initialiseFrom(Stage& stage, const SafeTensors& file, const std::string& source,
                          const std::string& prefix = "");

// The same from any source of tensors: `find` gives the tensor of a global parameter name
// (undefined when the source has none), read when asked (a Hugging Face directory reads
// only the tensors the stage holds).
using TensorLookup = std::function<at::Tensor(const std::string&)>;
InitResult initialiseFrom(Stage& stage, const TensorLookup& find, const std::string& source);

}  // namespace skytrain::stages
