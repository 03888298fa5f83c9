// Model sources (stages/models/model_source.h): each zoo kind cut into stages computes what the
// uncut model computes, with the same global parameter names.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <atomic>
#include <map>
#include <thread>

#include "stages/models/electra.h"
#include "stages/allocation_meter.h"
#include "stages/models/model_source.h"
#include "stages/models/torchscript/torchscript_stage.h"

#include <torch/script.h>
#include <filesystem>
#include <unistd.h>

using namespace skytrain::stages;

namespace {

ModelConfig config(const std::string& kind, std::vector<std::pair<int, int>> ranges) {
  ModelConfig c;
  c.kind = kind;
  c.gpt.vocabSize = 64;
  c.gpt.dModel = 32;
  c.gpt.heads = 4;
  c.gpt.layers = 4;
  c.gpt.dFf = 64;
  c.gpt.seqLen = 12;
  c.llama.vocabSize = 64;
  c.llama.dModel = 32;
  c.llama.heads = 4;
  c.llama.kvHeads = 2;
  c.llama.layers = 4;
  c.llama.dFf = 64;
  c.llama.seqLen = 12;
  c.seed = 9;
  for (const auto& [first, last] : ranges) c.stages.push_back({first, last, "", {}});
  return c;
}

}  // namespace

TEST_CASE("a zoo model cut into stages computes what the uncut model computes") {
  const std::string kind = GENERATE(as<std::string>{}, "gpt", "encoder", "gpt2", "llama");
  CAPTURE(kind);
  const auto whole = makeModelSource(config(kind, {{0, 4}}));
  const auto cut = makeModelSource(config(kind, {{0, 1}, {1, 3}, {3, 4}}));
  const at::Tensor ids = torch::randint(0, 64, {3, 12}, torch::kLong);
  const at::Tensor expected = whole->build(0)->infer(ids);
  at::Tensor x = ids;
  std::map<std::string, at::Tensor> names;
  for (int s = 0; s < 3; ++s) {
    auto stage = cut->build(s);
    CHECK(cut->inputShape(s, 3) == x.sizes().vec());
    x = stage->infer(x);
    for (const auto& [name, tensor] : stage->stateDict()) names[name] = tensor;
  }
  CHECK(torch::allclose(x, expected, 1e-5, 1e-6));
  // Global names: the stages together hold exactly the uncut model's tensors, equal.
  const auto all = whole->build(0)->stateDict();
  REQUIRE(names.size() == all.size());
  for (const auto& [name, tensor] : all) CHECK(torch::equal(names.at(name), tensor));
}

TEST_CASE("the encoder sees the whole sequence; the decoder only the past") {
  const at::Tensor ids = torch::randint(0, 64, {1, 12}, torch::kLong);
  at::Tensor later = ids.clone();
  later[0][11] = (ids[0][11].item<int64_t>() + 1) % 64;
  for (const std::string kind : {"gpt", "encoder"}) {
    auto stage = makeModelSource(config(kind, {{0, 4}}))->build(0);
    const bool changed = !torch::allclose(stage->infer(ids)[0][0], stage->infer(later)[0][0]);
    CHECK(changed == (kind == "encoder"));  // position 0 depends on the last token only in the encoder
  }
}

TEST_CASE("ELECTRA: generators predict the vocabulary, the discriminator one logit a token") {
  ModelConfig c = config("electra", {{0, 0}, {0, 0}, {0, 0}});
  c.generator = c.gpt;
  c.generator.dModel = 16;
  c.generator.heads = 2;
  c.generator.layers = 1;
  const auto source = makeModelSource(c);
  CHECK(source->fanIn());
  const at::Tensor ids = torch::randint(0, 63, {2, 12}, torch::kLong);
  auto g0 = source->build(0), g1 = source->build(1), d = source->build(2);
  CHECK(g0->infer(ids).sizes() == torch::IntArrayRef({2, 12, 64}));
  CHECK(d->infer(ids).sizes() == torch::IntArrayRef({2, 12, 1}));
  CHECK(source->inputShape(2, 2) == std::vector<int64_t>{2, 12, 2});
  // Two generators start from different weights: two languages, two models.
  CHECK_FALSE(torch::equal(g0->stateDict().front().second, g1->stateDict().front().second));
  // Masking and replacement: masked positions only, flags exactly where a token changed.
  const auto masked = maskTokens(ids, 1, 0, 0, 63, 63, 0.3);
  const at::Tensor chosen = masked.targets != -100;
  CHECK(chosen.any().item<bool>());
  CHECK(torch::equal(masked.inputs.masked_select(~chosen), ids.masked_select(~chosen)));
  CHECK(torch::equal(maskTokens(ids, 1, 0, 0, 63, 63, 0.3).inputs, masked.inputs));  // reproducible
  CHECK(torch::equal(maskTokens(ids.narrow(0, 1, 1), 1, 0, 1, 63, 63, 0.3).inputs, masked.inputs.narrow(0, 1, 1)));
  const at::Tensor replaced = replaceTokens(ids, g0->infer(masked.inputs), masked.targets, 1, 0, 0, 63);
  const at::Tensor corrupted = replaced.select(-1, 0), flags = replaced.select(-1, 1);
  CHECK(torch::equal(corrupted.masked_select(~chosen), ids.masked_select(~chosen)));
  CHECK(torch::equal(flags, (corrupted != ids).to(torch::kLong)));
  CHECK(corrupted.max().item<int64_t>() < 63);  // never [MASK]
  const at::Tensor loss = d->loss(d->infer(corrupted), flags);
  CHECK(loss.numel() == 1);
}

TEST_CASE("the classifier pools per-token logits over the sequence into one prediction per sample") {
  ModelConfig c = config("classifier", {{0, 4}});
  c.classes = 3;
  auto stage = makeModelSource(c)->build(0);
  const at::Tensor ids = torch::randint(0, 64, {5, 12}, torch::kLong);
  const at::Tensor logits = stage->infer(ids);
  CHECK(logits.sizes() == torch::IntArrayRef({5, 12, 3}));
  const at::Tensor labels = torch::tensor({0, 1, 2, 1, 0}, torch::kLong);
  const at::Tensor loss = stage->loss(logits, labels);
  CHECK(loss.item<double>() == Approx(torch::nn::functional::cross_entropy(logits.mean(1), labels).item<double>()));
  // Its head is "classifier", not "head": a pretrained model's head does not collide.
  bool named = false;
  for (const auto& [name, tensor] : stage->stateDict()) named = named || name == "classifier.weight";
  CHECK(named);
}

TEST_CASE("a TorchScript stage passes on a Tensor, a tuple's first element or a dict's logits; anything else is refused") {
  const auto [body, passes] = GENERATE(std::make_pair("return x * self.w", true),
                                       std::make_pair("return (x * self.w, x.sum())", true),  // nanoGPT's (logits, loss)
                                       std::make_pair("return [x * self.w, x]", true),
                                       std::make_pair("return {'logits': x * self.w, 'loss': x.sum()}", true),
                                       std::make_pair("return {'hidden': x * self.w}", false),
                                       std::make_pair("return 3", false));
  CAPTURE(body);
  torch::jit::Module module("Stage");
  module.register_parameter("w", torch::full({4}, 2.0), false);
  module.define(std::string("def forward(self, x):\n    ") + body + "\n");
  const std::string file = (std::filesystem::temp_directory_path() / ("ts-" + std::to_string(::getpid()) + ".pt")).string();
  module.save(file);
  auto stage = loadTorchScriptStage(file, false);
  const at::Tensor x = torch::ones({2, 4});
  if (passes) {
    CHECK(torch::equal(stage->infer(x), x * 2));
  } else {
    CHECK_THROWS_WITH(stage->infer(x), Catch::Contains("a stage passes on a Tensor, the first element of a tuple"));
  }
  std::filesystem::remove(file);
}

TEST_CASE("a TorchScript stage's activation stash is measured by one training forward, not guessed from its file") {
  // forward: relu(x @ w), x [b, 16, 8], w [8, 256]: relu keeps its output, 16 x 256 floats a
  // sample (16 KiB); x is the caller's, w the module's.
  torch::jit::Module module("Stage");
  module.register_parameter("w", torch::randn({8, 256}), false);
  module.define("def forward(self, x):\n    return torch.relu(torch.matmul(x, self.w))\n");
  const std::string file = (std::filesystem::temp_directory_path() / ("stash-" + std::to_string(::getpid()) + ".pt")).string();
  module.save(file);
  ModelConfig c;
  c.kind = "torchscript";
  c.gpt.seqLen = 16;
  c.stages = {{0, 0, "/nonexistent/stage-0.pt", {}}, {0, 0, file, {16, 8}}};
  const auto source = makeModelSource(c);
  // Another thread allocating meanwhile does not count.
  std::atomic<bool> stop{false};
  std::thread noise([&] {
    while (!stop) at::Tensor t = torch::empty({1 << 16});
  });
  const double measured = source->stashBytesPerSample(1);
  stop = true;
  noise.join();
  const double kept = 16 * 256 * 4;
  WARN("measured stash: " << measured << " bytes a sample (" << kept << " kept by relu)");
  CHECK(measured >= kept);
  CHECK(measured <= 2 * kept);
  CHECK(source->stashBytesPerSample(1) == measured);  // once per stage
  CHECK(source->stashBytesPerSample(0) == 0);          // cannot run here: build() says why
  std::filesystem::remove(file);
}

TEST_CASE("the allocation meter counts this thread's live tensors, not another thread's nor freed ones") {
  AllocationMeter meter;
  at::Tensor kept = torch::empty({1000});
  { at::Tensor freed = torch::empty({5000}); }
  std::thread([] { at::Tensor elsewhere = torch::empty({100000}); }).join();
  CHECK(meter.liveBytes() == 4000);
  kept = at::Tensor();
  CHECK(meter.liveBytes() == 0);
}
