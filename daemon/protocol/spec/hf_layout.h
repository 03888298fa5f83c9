// The Hugging Face layout of the zoo's `llama` and `gpt2` kinds (LlamaForCausalLM,
// GPT2LMHeadModel) and of the encoder and classifier in the bert layout (BertForMaskedLM,
// BertModel, BertForSequenceClassification): one table per family maps a skytrain parameter name to the
// checkpoint's, a spec is checked against a checkpoint's config.json, and config.json is
// written for export. No Torch: the CLI writes exports with it, the daemon reads imports.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "daemon/protocol/spec/job_spec.h"

namespace skytrain::protocol {

struct HfName {
  std::string name;
  bool transposed = false;  // GPT-2's Conv1D stores a linear layer's weight as [in, out]
};

// Whether the model has a Hugging Face layout: llama, gpt2, and the encoder and classifier
// in the bert layout. A subspace model reads one (a pretrained model converted into its
// form) but cannot be written as one.
bool hasHfLayout(const ModelSpec& model);

// The names a skytrain parameter may have in a checkpoint, preferred first (GPT-2's files
// come with and without the "transformer." prefix); empty: not part of the layout. A tied
// head maps to the embedding (the matrix it copies).
std::vector<HfName> hfNames(const ModelSpec& model, const std::string& name);

// Whether export writes the parameter (false: a tied head, written once as the embedding).
bool hfExported(const ModelSpec& model, const std::string& name);

// The tied pairs of a model cut into `stages` stages, as {the first holder's name, the
// copy's name}: a matrix the first and the last stage each hold (none under 2 stages); the
// same as stages/models/model_source.h's ModelSource::tied, which hf_checkpoint_test checks.
// Export writes an unchanged copy once, as the first name; init_from reads the first name
// for a copy the file lacks.
std::vector<std::pair<std::string, std::string>> tiedCopies(const ModelSpec& model, size_t stages);

// Every field of a checkpoint's config.json that disagrees with the spec, as
// "num_hidden_layers: config.json has 24, the spec 12" (absent fields take Hugging Face's
// defaults for the class); a config.json of another family is one entry naming model_type.
std::vector<std::string> checkHfConfig(const ModelSpec& model, const nlohmann::json& config);

// config.json for the spec's model; torchDtype: "float32", "bfloat16", "float16".
nlohmann::json hfConfig(const ModelSpec& model, const std::string& torchDtype);

}  // namespace skytrain::protocol
