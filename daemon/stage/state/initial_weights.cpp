#include "daemon/stage/state/initial_weights.h"

#include <torch/torch.h>

#include <algorithm>

#include "compression/wire/safetensors_header.h"
#include "daemon/ops/files.h"
#include "daemon/protocol/spec/hf_layout.h"
#include "scheduler/error.h"
#include "stages/weights/hf_checkpoint.h"
#include "stages/weights/weights.h"

namespace skytrain::daemon {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : "; ") + item;
  return out;
}

nlohmann::json loadHfDirectory(stages::Stage& stage, const protocol::ModelSpec& model, const std::string& dir) {
  if (!protocol::hasHfLayout(model)) {
    throw Error("init_from " + dir + " is a Hugging Face model directory; model.kind \"" + model.kind +
                "\" has no Hugging Face layout (llama, gpt2 and the bert layout have)");
  }
  stages::HfCheckpoint checkpoint(dir);
  const auto config = nlohmann::json::parse(checkpoint.configText(), nullptr, false);
  const auto problems = protocol::checkHfConfig(model, config);
  if (!problems.empty()) {
    throw Error("init_from " + dir + ": config.json does not describe the spec's model: " + joined(problems));
  }
  const auto result = stages::initialiseFrom(
      stage,
      [&](const std::string& name) {
        for (const auto& hf : protocol::hfNames(model, name)) {
          if (!checkpoint.has(hf.name)) continue;
          at::Tensor t = checkpoint.read(hf.name);
          if (!hf.transposed) return t;
          if (t.dim() != 2) throw Error(hf.name + ": a Conv1D weight has 2 dimensions, the file's " + c10::str(t.sizes()));
          return t.t().contiguous();
        }
        return at::Tensor();
      },
      dir);
  return {{"file", dir},
          {"loaded", result.loaded},
          {"from_seed", result.fromSeed.size()},
          {"format", "hf"},
          {"bytes_read", checkpoint.bytesRead()},
          {"bytes_total", checkpoint.totalBytes()},
          {"files", checkpoint.files()}};
}

// A tied matrix's copy that the file holds once, as the first holder's name (skytrain
// export writes it so): the copy reads that tensor, so the two stages start equal.
void withTiedCopies(stages::SafeTensors& file, const std::vector<std::pair<std::string, std::string>>& tied) {
  for (const auto& [first, copy] : tied) {
    const auto named = [&](const std::string& name) {
      return std::find_if(file.tensors.begin(), file.tensors.end(), [&](const auto& t) { return t.first == name; });
    };
    const auto original = named(first);
    if (original == file.tensors.end() || named(copy) != file.tensors.end()) continue;
    at::Tensor tensor = original->second;
    file.tensors.emplace_back(copy, tensor);
  }
}

}  // namespace

nlohmann::json loadInitialWeights(stages::Stage& stage, const protocol::JobSpec& spec, int stageIndex,
                                  const std::string& namePrefix) {
  std::vector<std::string> entries = spec.model.initFrom;
  const auto& own = spec.stages.at(stageIndex).initFrom;
  entries.insert(entries.end(), own.begin(), own.end());
  nlohmann::json report = nlohmann::json::array();
  for (const auto& entry : entries) {
    if (stages::HfCheckpoint::isModelDirectory(entry)) {
      report.push_back(loadHfDirectory(stage, spec.model, entry));
      continue;
    }
    // What the header says, no more (admission counted that): a file grown since is refused.
    const uint64_t bytes = compression::readSafetensorsHeader(entry).fileBytes;
    stages::SafeTensors file = stages::decodeSafetensors(readFile(entry, std::min<uint64_t>(bytes, kMaxInitBytes)), entry);
    withTiedCopies(file, protocol::tiedCopies(spec.model, spec.stages.size()));
    const auto result = stages::initialiseFrom(stage, file, entry, namePrefix);
    report.push_back({{"file", entry}, {"loaded", result.loaded}, {"from_seed", result.fromSeed.size()}});
  }
  return report;
}

}  // namespace skytrain::daemon
