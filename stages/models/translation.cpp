#include "stages/models/translation.h"

#include <torch/torch.h>

#include "scheduler/error.h"
#include "stages/models/gpt_modules.h"
#include "stages/module_stage.h"

namespace skytrain::stages {
namespace {

// A module holding one slice under a name, so its parameters are "<name>.<slice's names>".
struct Named : torch::nn::Module {
  Named(const std::string& name, std::shared_ptr<torch::nn::Module> inner) { register_module(name, std::move(inner)); }
};

std::shared_ptr<detail::GptSlice> makeSlice(const GptConfig& config, uint64_t seed) {
  detail::validate(config, 0, config.layers);
  auto slice = std::make_shared<detail::GptSlice>(config, 0, config.layers);
  detail::initialise(*slice, config, seed);
  return slice;
}

}  // namespace

TranslationIds translationIds(int vocabSize) { return {vocabSize - 3, vocabSize - 2, vocabSize - 1}; }

std::unique_ptr<Stage> makeTranslationEncoder(GptConfig config, uint64_t seed) {
  config.causal = false;
  config.head = false;
  config.crossAttention = false;
  auto slice = makeSlice(config, seed);
  ModuleHooks hooks = ModuleStage::hooksOf(std::make_shared<Named>("encoder", slice));
  hooks.forward = [slice](const at::Tensor& ids) { return slice->forward(ids); };
  return std::make_unique<ModuleStage>(std::move(hooks));
}

std::unique_ptr<Stage> makeTranslationDecoder(GptConfig config, uint64_t seed) {
  config.causal = true;
  config.head = true;
  config.outputs = 0;
  config.crossAttention = true;
  // Its own draws: the decoder's blocks share the encoder's names within their slices.
  auto slice = makeSlice(config, seed ^ 0xdec0de5eedULL);
  const int64_t t = config.seqLen, vocab = config.vocabSize;
  const TranslationIds ids = translationIds(config.vocabSize);
  auto targets = std::make_shared<at::Tensor>();
  ModuleHooks hooks = ModuleStage::hooksOf(std::make_shared<Named>("decoder", slice));
  hooks.setTargets = [targets](const at::Tensor& given) { *targets = given; };
  hooks.forward = [slice, targets, t](const at::Tensor& memory) {
    const at::Tensor& y = *targets;
    if (!y.defined() || y.dim() != 2 || y.size(1) != t + 1 || y.size(0) != memory.size(0)) {
      throw Error("the decoder needs targets [" + std::to_string(memory.size(0)) + ", " + std::to_string(t + 1) +
                  "] before its forward");
    }
    return slice->forward(y.narrow(1, 0, t), memory);
  };
  hooks.loss = [t, vocab, ids](const at::Tensor& logits, const at::Tensor& y) {
    namespace F = torch::nn::functional;
    return F::cross_entropy(logits.reshape({-1, vocab}), y.narrow(1, 1, t).reshape({-1}),
                            F::CrossEntropyFuncOptions().ignore_index(ids.pad));
  };
  hooks.generate = [slice, t, ids](const at::Tensor& memory, int maxTokens) {
    const int64_t b = memory.size(0), steps = std::min<int64_t>(maxTokens, t);
    at::Tensor out = torch::full({b, 1}, ids.bos, torch::kLong);
    at::Tensor done = torch::zeros({b}, torch::kBool);
    for (int64_t i = 0; i < steps; ++i) {
      // Only the last position's logits are needed: the head runs on it alone.
      at::Tensor next = slice->head->forward(slice->features(out, memory).select(1, i)).argmax(-1);
      next = torch::where(done, torch::full_like(next, ids.pad), next);
      out = torch::cat({out, next.unsqueeze(1)}, 1);
      done = done.logical_or(next.eq(ids.eos));
      if (done.all().item<bool>()) break;
    }
    return out.narrow(1, 1, out.size(1) - 1);
  };
  return std::make_unique<ModuleStage>(std::move(hooks));
}

std::vector<int32_t> generatedTokens(const at::Tensor& row, int vocabSize) {
  const TranslationIds ids = translationIds(vocabSize);
  std::vector<int32_t> out;
  const at::Tensor r = row.to(torch::kLong).contiguous();
  const int64_t* p = r.data_ptr<int64_t>();
  for (int64_t i = 0; i < r.numel(); ++i) {
    if (p[i] == ids.eos) break;
    if (p[i] >= 0 && p[i] < ids.pad) out.push_back(static_cast<int32_t>(p[i]));
  }
  return out;
}

}  // namespace skytrain::stages
