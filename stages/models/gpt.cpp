#include "stages/models/gpt.h"

#include <torch/torch.h>

#include <algorithm>

#include "scheduler/error.h"
#include "stages/models/gpt_modules.h"
#include "stages/models/subspace/subspace_modules.h"
#include "stages/module_stage.h"

namespace skytrain::stages {
namespace {

// A split point's factors from a pretrained model's unfactored weight and bias.
std::vector<std::string> adoptFactors(detail::GptSlice& slice, const std::function<at::Tensor(const std::string&)>& find) {
  std::vector<std::string> set;
  for (auto& block : slice.blocks) {
    auto factored = std::dynamic_pointer_cast<detail::FactoredBlock>(block);
    if (!factored) continue;
    const std::string layer = factored->layerName();
    const at::Tensor w = find(layer + ".weight"), bias = find(layer + ".bias");
    if (!w.defined() || !bias.defined()) continue;
    const int64_t out = factored->u ? factored->u->weight.size(0) : -1;
    const int64_t in = factored->v ? factored->v->weight.size(1) : -1;
    if (w.dim() != 2 || (out >= 0 && w.size(0) != out) || (in >= 0 && w.size(1) != in) || bias.dim() != 1 ||
        bias.size(0) != w.size(0) || !w.is_floating_point() || !bias.is_floating_point()) {
      throw Error(layer + ": the file's weight " + c10::str(w.sizes()) + " and bias " + c10::str(bias.sizes()) +
                  " do not fit the split point's factors");
    }
    factored->factor(w, bias.to(torch::kFloat));
    const std::string prefix = "block" + std::to_string(factored->index) + ".";
    for (const auto& item : factored->named_parameters()) {
      if (item.key().find("_v.") != std::string::npos || item.key().find("_s.") != std::string::npos ||
          item.key().find("_u.") != std::string::npos) {
        set.push_back(prefix + item.key());
      }
    }
  }
  return set;
}

// A pretrained GPT's tensors into a subspace slice (detail::adoptPretrained).
std::vector<std::string> adoptSubspace(detail::SubspaceSlice& slice, const GptConfig& c, int firstLayer,
                                       const std::function<at::Tensor(const std::string&)>& find) {
  const std::vector<std::string> writers = detail::writerNames(c.layers, {"attn.proj", "proj"});
  std::vector<std::pair<std::string, torch::nn::Linear>> own;
  for (size_t i = 0; i < slice.blocks.size(); ++i) {
    const std::string block = "block" + std::to_string(firstLayer + static_cast<int>(i));
    own.emplace_back(block + ".attn.proj", slice.blocks[i]->attn->proj);
    own.emplace_back(block + ".proj", slice.blocks[i]->proj);
  }
  return detail::adoptPretrained(*slice.frame, find, writers, own, slice.tok, slice.pos, slice.head, slice.tied);
}

}  // namespace

std::unique_ptr<Stage> makeGptStage(const GptConfig& config, int firstLayer, int lastLayer, uint64_t seed,
                                    std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss) {
  detail::validate(config, firstLayer, lastLayer);
  if (config.subspaceRank > 0) {
    auto slice = std::make_shared<detail::SubspaceSlice>(config, firstLayer, lastLayer, seed);
    detail::initialiseParameters(*slice, config, seed);  // its output projections k wide
    ModuleHooks hooks = ModuleStage::hooksOf(slice);
    hooks.forward = [slice](const at::Tensor& x) { return slice->forward(x); };
    hooks.setTokens = [slice](const at::Tensor& ids) { slice->setTokens(ids); };
    hooks.adopt = [slice, config, firstLayer](const std::function<at::Tensor(const std::string&)>& find) {
      return adoptSubspace(*slice, config, firstLayer, find);
    };
    hooks.loss = std::move(loss);
    return std::make_unique<ModuleStage>(std::move(hooks));
  }
  auto slice = std::make_shared<detail::GptSlice>(config, firstLayer, lastLayer);
  detail::initialise(*slice, config, seed);
  ModuleHooks hooks = ModuleStage::hooksOf(slice);
  hooks.forward = [slice](const at::Tensor& x) { return slice->forward(x); };
  hooks.loss = std::move(loss);
  hooks.adopt = [slice](const std::function<at::Tensor(const std::string&)>& find) { return adoptFactors(*slice, find); };
  if (config.cutRank > 0) {  // a learned code at the cuts (no split point then)
    hooks.setTokens = [slice](const at::Tensor& ids) { slice->setTokens(ids); };
    detail::hookCuts(hooks, std::shared_ptr<detail::SliceCuts>(slice, &slice->cuts));
    hooks.adopt = [slice, layers = config.layers](const std::function<at::Tensor(const std::string&)>& find) {
      return slice->cuts.adopt(
          find, [](int layer) { return detail::writerNames(layer, {"attn.proj", "proj"}); }, layers);
    };
  }
  return std::make_unique<ModuleStage>(std::move(hooks));
}

int64_t subspaceFrameCount(int64_t vocab, int64_t width, int64_t rank, int64_t positions) {
  return vocab * width + positions * width + width * rank;
}

std::vector<int64_t> gptInputShape(const GptConfig& c, int firstLayer, int64_t samples) {
  if (firstLayer == 0) return {samples, c.seqLen};
  if (c.subspaceRank > 0) return {samples, c.seqLen, c.subspaceRank};
  if (c.cutRank > 0 && std::find(c.cuts.begin(), c.cuts.end(), firstLayer) != c.cuts.end()) {
    return {samples, c.seqLen, c.cutRank};
  }
  int64_t width = c.dModel;
  if (c.split.enabled() && c.split.block == firstLayer - 1) width = c.split.rank + (c.split.keepResidual ? c.dModel : 0);
  return {samples, c.seqLen, width};
}

double gptStashBytesPerSample(const GptConfig& c, int firstLayer, int lastLayer) {
  const double t = c.seqLen;
  const double block = t * (16.0 * c.dModel + 3.0 * c.dFf + 2.0 * c.heads * t);
  // Recompute: every block's input, and one block's activations while it is replayed.
  double floats = c.recompute && !c.crossAttention ? (lastLayer - firstLayer) * t * c.dModel + block
                                                   : (lastLayer - firstLayer) * block;
  if (lastLayer == c.layers) floats += 2.0 * t * (c.outputs > 0 ? c.outputs : c.vocabSize);
  if (c.subspaceRank > 0) floats += (lastLayer - firstLayer + 1) * 2.0 * t * c.dModel;  // F and each rebuilt h
  floats += cutCodeStashFloats(c.cutRank, c.cuts, firstLayer, lastLayer, t, c.dModel, c.senderLoss > 0 ? c.vocabSize : 0);
  return 4.0 * floats;
}

int64_t gptParameterCount(const GptConfig& c, int firstLayer, int lastLayer) {
  detail::validate(c, firstLayer, lastLayer);
  const int64_t d = c.dModel, ff = c.dFf;
  if (c.subspaceRank > 0) {
    const int64_t k = c.subspaceRank, t = c.positions > 0 ? c.positions : c.seqLen;
    const int64_t block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * k + k) + (d * ff + ff) + (ff * k + k);
    int64_t count = block * (lastLayer - firstLayer) + subspaceFrameCount(c.vocabSize, d, k, t);
    if (firstLayer == 0) count += int64_t{c.vocabSize} * k + t * k;
    // Tied: the head is the k-wide embedding, the first stage's own or a copy.
    const int64_t head = c.tieEmbeddings ? (firstLayer == 0 ? 0 : int64_t{c.vocabSize} * k) : d * c.vocabSize;
    if (lastLayer == c.layers) count += 2 * d + head;
    return count;
  }
  int64_t block = 2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * ff + ff) + (ff * d + d);
  if (c.crossAttention) block += 2 * d + (d * d + d) + (2 * d * d + 2 * d) + (d * d + d);
  if (c.adapter > 0) block += (c.crossAttention ? 3 : 2) * (2 * d * c.adapter + c.adapter + d);
  int64_t count = block * (lastLayer - firstLayer);
  if (firstLayer == 0) count += c.vocabSize * d + int64_t{c.positions > 0 ? c.positions : c.seqLen} * d;
  count += cutCodeParameterCount(c.cutRank, c.cuts, firstLayer, lastLayer, c.vocabSize, d,
                                 c.positions > 0 ? c.positions : c.seqLen, c.senderLoss > 0 ? 2 * d + d * c.vocabSize : 0);
  if (lastLayer == c.layers) count += 2 * d;
  const bool tiedHere = c.tieEmbeddings && firstLayer == 0;
  if (lastLayer == c.layers && c.head && !tiedHere) count += c.outputs > 0 ? (d + 1) * c.outputs : d * c.vocabSize;
  return count;
}

}  // namespace skytrain::stages
