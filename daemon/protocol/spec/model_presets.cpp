#include "daemon/protocol/spec/model_presets.h"

namespace skytrain::protocol {

const std::vector<ModelPreset>& modelPresets() {
  // name, kind, vocab, d_model, heads, kv_heads, layers, d_ff, seq_len, positions, rope_theta, tied
  static const std::vector<ModelPreset> presets{
      // GPT-2 (Radford et al. 2019), as Hugging Face's gpt2, gpt2-medium, gpt2-large, gpt2-xl.
      {"gpt2-small", "gpt2", 50257, 768, 12, 12, 12, 3072, 1024, 1024, 10000.0, true},
      {"gpt2-medium", "gpt2", 50257, 1024, 16, 16, 24, 4096, 1024, 1024, 10000.0, true},
      {"gpt2-large", "gpt2", 50257, 1280, 20, 20, 36, 5120, 1024, 1024, 10000.0, true},
      {"gpt2-xl", "gpt2", 50257, 1600, 25, 25, 48, 6400, 1024, 1024, 10000.0, true},
      // LLaMA shapes: a demo size, a GPT-2-small-sized one (as JackFram/llama-160m), Llama 3.2
      // 1B, Llama 2 7B and Llama 3 8B.
      {"llama-tiny", "llama", 256, 64, 4, 2, 4, 192, 64, 64, 10000.0, false},
      {"llama-160m", "llama", 32000, 768, 12, 12, 12, 3072, 2048, 2048, 10000.0, false},
      {"llama-1b", "llama", 128256, 2048, 32, 8, 16, 8192, 8192, 8192, 500000.0, true},
      {"llama-7b", "llama", 32000, 4096, 32, 32, 32, 11008, 4096, 4096, 10000.0, false},
      {"llama-8b", "llama", 128256, 4096, 32, 8, 32, 14336, 8192, 8192, 500000.0, false},
      // BERT (Devlin et al. 2019): the encoder and classifier kinds with "layout": "bert".
      {"bert-base", "bert", 30522, 768, 12, 12, 12, 3072, 512, 512, 10000.0, true},
      {"bert-large", "bert", 30522, 1024, 16, 16, 24, 4096, 512, 512, 10000.0, true},
  };
  return presets;
}

const ModelPreset* findPreset(const std::string& name) {
  for (const auto& preset : modelPresets()) {
    if (preset.name == name) return &preset;
  }
  return nullptr;
}

}  // namespace skytrain::protocol
