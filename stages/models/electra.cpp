#include "stages/models/electra.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "stages/seeding.h"

namespace skytrain::stages {
namespace {

at::Generator sampleGenerator(uint64_t seed, uint64_t step, int64_t sample, uint64_t purpose) {
  const uint64_t key = splitmix64(seed ^ purpose) ^ splitmix64(step) ^ splitmix64(static_cast<uint64_t>(sample) + 0x5eed);
  return at::make_generator<at::CPUGeneratorImpl>(splitmix64(key));
}

}  // namespace

MaskedTokens maskTokens(const at::Tensor& ids, uint64_t seed, uint64_t step, int64_t firstSample, int64_t maskId,
                        int64_t vocab, double rate) {
  MaskedTokens out{ids.clone(), torch::full_like(ids, -100)};
  for (int64_t i = 0; i < ids.size(0); ++i) {
    auto generator = sampleGenerator(seed, step, firstSample + i, 0x6d61736b);  // "mask"
    const at::Tensor draw = torch::rand({ids.size(1)}, generator);
    const at::Tensor kind = torch::rand({ids.size(1)}, generator);
    const at::Tensor random = torch::randint(0, vocab, {ids.size(1)}, generator, torch::kLong);
    const at::Tensor chosen = draw < rate;
    out.targets[i].masked_scatter_(chosen, ids[i].masked_select(chosen));
    at::Tensor row = out.inputs[i];
    row.masked_fill_(chosen & (kind < 0.8), maskId);
    const at::Tensor randomized = chosen & (kind >= 0.8) & (kind < 0.9);
    row.masked_scatter_(randomized, random.masked_select(randomized));
  }
  return out;
}

at::Tensor replaceTokens(const at::Tensor& original, const at::Tensor& logits, const at::Tensor& targets, uint64_t seed,
                         uint64_t step, int64_t firstSample, int64_t vocab) {
  torch::NoGradGuard noGrad;
  at::Tensor corrupted = original.clone();
  const at::Tensor probabilities = torch::softmax(logits.detach().narrow(-1, 0, vocab).to(torch::kFloat), -1);
  for (int64_t i = 0; i < original.size(0); ++i) {
    const at::Tensor chosen = targets[i] != -100;
    if (!chosen.any().item<bool>()) continue;
    auto generator = sampleGenerator(seed, step, firstSample + i, 0x73616d70);  // "samp"
    const at::Tensor rows = probabilities[i].index({chosen});
    const at::Tensor sampled = torch::multinomial(rows, 1, false, generator).squeeze(1);
    corrupted[i].masked_scatter_(chosen, sampled);
  }
  const at::Tensor replaced = (corrupted != original).to(torch::kLong);
  return torch::stack({corrupted, replaced}, -1);
}

at::Tensor replacedTokenLoss(const at::Tensor& logits, const at::Tensor& replaced) {
  return torch::binary_cross_entropy_with_logits(logits.squeeze(-1), replaced.to(logits.scalar_type()));
}

}  // namespace skytrain::stages
