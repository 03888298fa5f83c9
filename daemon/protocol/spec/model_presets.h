// Named model sizes (`model.preset`), so a spec does not repeat a paper's table: GPT-2's
// four sizes and LLaMA-family shapes. A spec's own fields override a preset's.
#pragma once

#include <string>
#include <vector>

namespace skytrain::protocol {

struct ModelPreset {
  std::string name;
  std::string kind;  // "gpt2", "llama", or "bert" (the encoder and classifier's bert layout)
  int vocabSize = 0;
  int dModel = 0;
  int heads = 0;
  int kvHeads = 0;
  int layers = 0;
  int dFf = 0;
  int seqLen = 0;     // the context the model was trained with (max_position_embeddings)
  int positions = 0;  // gpt2: rows of the learned position table; llama: max_position_embeddings
  double ropeTheta = 10000.0;
  bool tieEmbeddings = false;
};

const std::vector<ModelPreset>& modelPresets();
// Null for an unknown name.
const ModelPreset* findPreset(const std::string& name);

}  // namespace skytrain::protocol
