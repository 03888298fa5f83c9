// init_from and trainable (stages/weights/weights.h) on the zoo's GPT.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <algorithm>

#include "scheduler/error.h"
#include "stages/models/gpt.h"
#include "stages/weights/weights.h"

using namespace skytrain;
using namespace skytrain::stages;

namespace {

GptConfig config(int dModel) {
  GptConfig c;
  c.dModel = dModel;
  c.heads = 4;
  c.layers = 2;
  c.dFf = 64;
  c.seqLen = 16;
  return c;
}

const GptConfig kConfig = config(32);

SafeTensors weightsOf(const Stage& stage, const std::string& prefix = "") {
  SafeTensors out;
  for (const auto& [name, tensor] : stage.stateDict()) out.tensors.emplace_back(prefix + name, tensor.detach().clone());
  return out;
}

}  // namespace

TEST_CASE("trainable patterns freeze the rest; no patterns train everything") {
  auto stage = makeGptStage(kConfig, 0, 2, 1);
  const auto all = countParameters(*stage);
  CHECK(all.frozen == 0);
  CHECK(all.trainable == gptParameterCount(kConfig, 0, 2));
  const auto counts = applyTrainable(*stage, {"block1.*", "head.*"});
  CHECK(counts.trainable + counts.frozen == all.trainable);
  CHECK(counts.trainable == gptParameterCount(kConfig, 1, 2) - 2 * 32);  // block 1 and the head, not ln_f
  for (const auto& [name, p] : stage->namedParameters()) {
    INFO(name);
    CHECK(p.requires_grad() == (name.rfind("block1.", 0) == 0 || name.rfind("head.", 0) == 0));
  }
  CHECK(stage->parameters().size() < stage->namedParameters().size());  // the optimizer sees only these
  // `*` crosses dots: one pattern can pick a parameter in every block.
  CHECK(applyTrainable(*stage, {"*.ln1.*"}).trainable == 2 * 2 * 32);
}

TEST_CASE("weight decay's groups: the LLM rule by default, globs when given, a tied head as its embedding") {
  auto whole = makeGptStage(kConfig, 0, 2, 1);
  std::vector<std::string> names;
  for (const auto& [name, p] : whole->namedParameters()) names.push_back(name);
  auto has = [](const std::vector<std::string>& v, const std::string& n) { return std::find(v.begin(), v.end(), n) != v.end(); };
  SECTION("default: biases, norm gains and embedding tables skip decay; the matrices decay") {
    const DecayGroups groups = splitByDecay(*whole, std::nullopt);
    CHECK(groups.decay.size() + groups.noDecay.size() == names.size());
    for (const auto& [name, p] : whole->namedParameters()) {
      INFO(name);
      const bool expected = p.dim() < 2 || name == "tok_emb.weight" || name == "pos_emb";
      CHECK(has(groups.noDecayNames, name) == expected);
    }
    CHECK(has(groups.noDecayNames, "block0.ln1.weight"));
    CHECK(has(groups.noDecayNames, "block1.fc.bias"));
    CHECK_FALSE(has(groups.noDecayNames, "block1.fc.weight"));
    CHECK_FALSE(has(groups.noDecayNames, "head.weight"));
  }
  SECTION("globs replace the rule; [] decays everything") {
    CHECK(splitByDecay(*whole, std::vector<std::string>{}).noDecay.empty());
    const DecayGroups groups = splitByDecay(*whole, std::vector<std::string>{"*.bias"});
    auto isBias = [](const std::string& n) { return n.size() > 5 && n.compare(n.size() - 5, 5, ".bias") == 0; };
    for (const auto& name : names) CHECK(has(groups.noDecayNames, name) == isBias(name));
    CHECK_FALSE(groups.noDecayNames.empty());
  }
  SECTION("a tied head is judged as the embedding it copies") {
    CHECK(has(splitByDecay(*whole, std::nullopt, {{"head.weight", "tok_emb.weight"}}).noDecayNames, "head.weight"));
  }
  SECTION("frozen parameters are in neither group") {
    applyTrainable(*whole, {"block1.*"});
    const DecayGroups groups = splitByDecay(*whole, std::nullopt);
    for (const auto& name : groups.noDecayNames) CHECK(name.rfind("block1.", 0) == 0);
    CHECK(groups.decay.size() + groups.noDecay.size() == whole->parameters().size());
  }
}

TEST_CASE("init_from copies tensors by name, from plain files and skytrain checkpoints, converting dtypes") {
  auto source = makeGptStage(kConfig, 0, 2, 7);
  SECTION("a plain safetensors file, in half precision") {
    SafeTensors half = weightsOf(*source);
    for (auto& [name, tensor] : half.tensors) tensor = tensor.to(torch::kHalf);
    auto stage = makeGptStage(kConfig, 0, 2, 1);
    const auto result = initialiseFrom(*stage, half, "half.safetensors");
    CHECK(result.loaded == static_cast<int>(stage->namedParameters().size()));
    CHECK(result.fromSeed.empty());
    const at::Tensor expected = half.tensors.front().second.to(torch::kFloat);
    CHECK(torch::equal(stage->namedParameters().front().second, expected));
  }
  SECTION("a checkpoint's param/ entries; its AdamW state is ignored; a new head keeps its seed") {
    SafeTensors checkpoint = weightsOf(*source, "param/");
    checkpoint.tensors.emplace_back("adamw/head.weight/exp_avg", torch::zeros({1}));
    checkpoint.tensors.erase(std::remove_if(checkpoint.tensors.begin(), checkpoint.tensors.end(),
                                            [](const auto& t) { return t.first.rfind("param/head.", 0) == 0; }),
                             checkpoint.tensors.end());
    auto stage = makeGptStage(kConfig, 0, 2, 1);
    const at::Tensor seededHead = stage->stateDict().back().second.clone();
    const auto result = initialiseFrom(*stage, checkpoint, "ckpt.safetensors");
    CHECK(result.fromSeed == std::vector<std::string>{"head.weight"});
    for (const auto& [name, tensor] : stage->namedParameters()) {
      if (name == "head.weight") CHECK(torch::equal(tensor, seededHead));
    }
  }
  SECTION("a frozen parameter the file lacks, and shapes that differ, are refused together") {
    SafeTensors file = weightsOf(*makeGptStage(config(48), 0, 2, 7));
    file.tensors.erase(file.tensors.begin());  // pos_emb
    auto stage = makeGptStage(kConfig, 0, 2, 1);
    applyTrainable(*stage, {"head.*"});
    try {
      initialiseFrom(*stage, file, "wrong.safetensors");
      FAIL("accepted");
    } catch (const Error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(what.find("init_from wrong.safetensors:") == 0);
      CHECK(what.find("pos_emb: frozen but not in the file") != std::string::npos);
      CHECK(what.find("tok_emb.weight: the file's is [256, 48], the stage's [256, 32]") != std::string::npos);
      CHECK(what.find("more") != std::string::npos);
    }
  }
}
