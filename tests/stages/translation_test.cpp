// Fine-tuning pretrained trunks (issue: cross-cloud fine-tuning): the translation model's
// encoder and decoder load pretrained files by name under their prefixes, adapters start as
// the identity, only the parameters the trainable patterns name change, greedy decoding
// stops at [EOS]; and an encoder's split point set from a pretrained file's weight at full
// rank (with the residual kept) computes what the unsplit pretrained encoder computes.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "stages/models/model_source.h"
#include "stages/data/parallel_data.h"
#include "stages/models/translation.h"
#include "stages/weights/weights.h"

using namespace skytrain::stages;

namespace {

GptConfig trunk(bool causal) {
  GptConfig c;
  c.vocabSize = 40;  // 37 token IDs + [PAD] [BOS] [EOS]
  c.dModel = 32;
  c.heads = 4;
  c.layers = 2;
  c.dFf = 64;
  c.seqLen = 10;
  c.causal = causal;
  return c;
}

SafeTensors fileOf(const Stage& stage) {
  SafeTensors out;
  for (const auto& [name, tensor] : stage.stateDict()) out.tensors.emplace_back(name, tensor.detach().clone());
  return out;
}

std::map<std::string, at::Tensor> snapshot(const Stage& stage) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, tensor] : stage.namedParameters()) out[name] = tensor.detach().clone();
  return out;
}

// Targets [b, T + 1]: [BOS] ids [EOS] [PAD]...
at::Tensor targetsOf(const at::Tensor& ids, int vocab) {
  const auto specials = translationIds(vocab);
  const int64_t b = ids.size(0), t = ids.size(1);
  auto out = torch::full({b, t + 2}, specials.pad, torch::kLong);
  out.select(1, 0).fill_(specials.bos);
  out.narrow(1, 1, t).copy_(ids);
  out.select(1, t + 1).fill_(specials.eos);
  return out;
}

}  // namespace

TEST_CASE("pretrained trunks load under the encoder's and decoder's prefixes; adapters start as the identity") {
  GptConfig c = trunk(true);
  c.adapter = 8;
  const auto pretrainedLm = makeGptStage(trunk(true), 0, 2, 11);
  const auto pretrainedEncoder = makeGptStage(trunk(false), 0, 2, 12);
  auto encoder = makeTranslationEncoder(c, 1);
  auto decoder = makeTranslationDecoder(c, 1);
  applyTrainable(*encoder, {"*adapter*"});
  applyTrainable(*decoder, {"*adapter*", "*.cross.*", "*.ln_cross.*"});
  const auto e = initialiseFrom(*encoder, fileOf(*pretrainedEncoder), "encoder.safetensors", kEncoderPrefix);
  const auto d = initialiseFrom(*decoder, fileOf(*pretrainedLm), "lm.safetensors", kDecoderPrefix);
  CHECK(e.loaded > 0);
  CHECK(d.loaded > 0);
  for (const auto& name : e.fromSeed) CHECK(name.find("adapter") != std::string::npos);
  for (const auto& name : d.fromSeed) CHECK((name.find("adapter") != std::string::npos || name.find("cross") != std::string::npos));
  for (const auto& [name, p] : encoder->namedParameters()) CHECK(name.rfind("encoder.", 0) == 0);
  for (const auto& [name, p] : decoder->namedParameters()) CHECK(name.rfind("decoder.", 0) == 0);

  // With the adapters' up projections and cross-attention's output at zero, the decoder is
  // the pretrained LM whatever the memory, and the encoder the pretrained encoder's trunk.
  torch::manual_seed(3);
  const at::Tensor source = torch::randint(0, 37, {2, 10}, torch::kLong);
  const at::Tensor target = torch::randint(0, 37, {2, 8}, torch::kLong);
  const at::Tensor memory = encoder->infer(source);
  CHECK(memory.sizes() == std::vector<int64_t>{2, 10, 32});
  const at::Tensor y = targetsOf(target, c.vocabSize);  // [2, 10]: BOS, 8 ids, EOS
  auto padded = torch::cat({y, torch::full({2, 1}, translationIds(c.vocabSize).pad, torch::kLong)}, 1);  // [2, T + 1]
  decoder->setTargets(padded);
  const at::Tensor logits = decoder->infer(memory);
  CHECK(torch::allclose(logits, pretrainedLm->infer(padded.narrow(1, 0, 10)), 1e-5, 1e-5));

  // The encoder's trunk: the pretrained encoder's logits are its head over the memory.
  const at::Tensor expected = pretrainedEncoder->infer(source);
  at::Tensor headWeight;
  for (const auto& [name, p] : pretrainedEncoder->namedParameters()) {
    if (name == "head.weight") headWeight = p;
  }
  REQUIRE(headWeight.defined());
  CHECK(torch::allclose(torch::matmul(memory, headWeight.t()), expected, 1e-5, 1e-5));
}

TEST_CASE("with the trunks frozen, only the adapters and the cross-attention change in training") {
  GptConfig c = trunk(true);
  c.adapter = 4;
  auto encoder = makeTranslationEncoder(c, 1);
  auto decoder = makeTranslationDecoder(c, 1);
  applyTrainable(*encoder, {"*adapter*"});
  const auto counts = applyTrainable(*decoder, {"*adapter*", "*.cross.*", "*.ln_cross.*"});
  CHECK(counts.frozen > counts.trainable);
  const auto encoderBefore = snapshot(*encoder), decoderBefore = snapshot(*decoder);
  std::vector<at::Tensor> parameters = encoder->parameters();
  for (const auto& p : decoder->parameters()) parameters.push_back(p);
  torch::optim::AdamW optimizer(parameters, torch::optim::AdamWOptions(1e-2));
  torch::manual_seed(4);
  for (int step = 0; step < 3; ++step) {
    const at::Tensor source = torch::randint(0, 37, {4, 10}, torch::kLong);
    auto y = torch::cat({targetsOf(torch::randint(0, 37, {4, 7}, torch::kLong), c.vocabSize),
                         torch::full({4, 2}, translationIds(c.vocabSize).pad, torch::kLong)},
                        1);  // [4, T + 1]
    const at::Tensor memory = encoder->forward(0, source);
    decoder->setTargets(y);
    at::Tensor logits = decoder->forward(0, memory).requires_grad_(true);
    decoder->loss(logits, y).backward();
    encoder->backward(0, decoder->backward(0, logits.grad()));
    optimizer.step();
    optimizer.zero_grad();
  }
  auto check = [](const Stage& stage, const std::map<std::string, at::Tensor>& before) {
    int changed = 0;
    for (const auto& [name, p] : stage.namedParameters()) {
      CAPTURE(name);
      const bool same = torch::equal(p, before.at(name));
      if (p.requires_grad()) {
        CHECK((name.find("adapter") != std::string::npos || name.find("cross") != std::string::npos));
        changed += same ? 0 : 1;
      } else {
        CHECK(same);
      }
    }
    return changed;
  };
  CHECK(check(*encoder, encoderBefore) > 0);
  CHECK(check(*decoder, decoderBefore) > 0);
}

TEST_CASE("greedy decoding stops at [EOS]; the generated tokens leave the specials out") {
  GptConfig c = trunk(true);
  auto encoder = makeTranslationEncoder(c, 1);
  auto decoder = makeTranslationDecoder(c, 1);
  torch::manual_seed(5);
  const at::Tensor memory = encoder->infer(torch::randint(0, 37, {3, 10}, torch::kLong));
  const at::Tensor out = decoder->generate(memory, 6);
  CHECK(out.size(0) == 3);
  CHECK(out.size(1) <= 6);
  const auto ids = translationIds(c.vocabSize);
  const at::Tensor row = torch::tensor({int64_t{5}, int64_t{7}, ids.bos, int64_t{9}, ids.eos, int64_t{3}, ids.pad});
  CHECK(generatedTokens(row, c.vocabSize) == std::vector<int32_t>{5, 7, 9});
  CHECK_THROWS(makeGptStage(c, 0, 2, 1)->generate(memory, 4));  // an LM stage without the decoder's hooks
}

TEST_CASE("an encoder's split point set from a pretrained weight, full rank with the residual, changes nothing") {
  const auto layer = GENERATE(SplitPoint::Layer::Fc, SplitPoint::Layer::Proj);
  GptConfig plain = trunk(false);
  plain.layers = 3;
  const auto pretrained = makeGptStage(plain, 0, 3, 21);
  GptConfig split = plain;
  split.split.block = GENERATE(0, 1, 2);
  split.split.layer = layer;
  split.split.rank = 32;  // min(d_model, d_ff)
  split.split.keepResidual = true;
  CAPTURE(split.split.block);
  torch::manual_seed(6);
  const at::Tensor ids = torch::randint(0, 37, {2, 10}, torch::kLong);
  const at::Tensor expected = pretrained->infer(ids);
  // Another seed: every weight, the factors included, must come from the file.
  const int cut = split.split.block + 1;
  if (cut < 3) {
    auto front = makeGptStage(split, 0, cut, 99), back = makeGptStage(split, cut, 3, 99);
    const auto file = fileOf(*pretrained);
    CHECK(initialiseFrom(*front, file, "pretrained").fromSeed.empty());
    CHECK(initialiseFrom(*back, file, "pretrained").fromSeed.empty());
    CHECK(torch::allclose(back->infer(front->infer(ids)), expected, 1e-4, 1e-4));
  } else {
    auto whole = makeGptStage(split, 0, 3, 99);
    CHECK(initialiseFrom(*whole, fileOf(*pretrained), "pretrained").fromSeed.empty());
    CHECK(torch::allclose(whole->infer(ids), expected, 1e-4, 1e-4));
  }
}

TEST_CASE("the translation source: two stages, the memory crosses, names carry the prefixes") {
  ModelConfig m;
  m.kind = "translation";
  m.gpt = trunk(true);
  m.gpt.adapter = 4;
  m.decoderLayers = 3;
  m.seed = 2;
  m.stages = {{0, 0, "", {}}, {0, 0, "", {}}};
  const auto source = makeModelSource(m);
  CHECK(source->inputShape(0, 5) == std::vector<int64_t>{5, 10});
  CHECK(source->inputShape(1, 5) == std::vector<int64_t>{5, 10, 32});
  CHECK(source->namePrefix(0) == "encoder.");
  CHECK(source->namePrefix(1) == "decoder.");
  const auto decoder = source->build(1);
  int64_t count = 0;
  for (const auto& [name, p] : decoder->namedParameters()) count += p.numel();
  CHECK(static_cast<double>(count) * 4 == Approx(source->weightBytes(1)));
  m.stages.pop_back();
  CHECK_THROWS(makeModelSource(m));
}

TEST_CASE("parallel data: padded sources, [BOS] target [EOS] targets, references as written, long pairs skipped") {
  const auto dir = std::filesystem::temp_directory_path() / ("skytrain_parallel_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto train = (dir / "train.tsv").string(), test = (dir / "test.tsv").string();
  std::ofstream(train) << "hola\thello\nadios\tgoodbye\nuna frase demasiado larga\tshort\n";
  std::ofstream(test) << "si\tyes\n\nno\tno \"quoted\"\n";
  ParallelDataOptions o;
  o.files = {train};
  o.evalFiles = {test};
  o.seqLen = 12;
  o.vocabSize = 259;
  ParallelDataSource data(o);
  CHECK(data.trainSize() == 2);
  CHECK(data.skipped() == 1);
  CHECK(data.validationSize() == 2);
  const auto ids = translationIds(259);
  const auto batch = data.validationBatch(0, 3);
  CHECK(batch.inputs.sizes() == std::vector<int64_t>{3, 12});
  CHECK(batch.targets.sizes() == std::vector<int64_t>{3, 13});
  CHECK(batch.inputs[0][0].item<int64_t>() == 's');
  CHECK(batch.inputs[0][2].item<int64_t>() == ids.pad);
  CHECK(batch.targets[0][0].item<int64_t>() == ids.bos);
  CHECK(batch.targets[0][1].item<int64_t>() == 'y');
  CHECK(batch.targets[0][4].item<int64_t>() == ids.eos);
  CHECK(batch.targets[0][5].item<int64_t>() == ids.pad);
  CHECK(data.validationReference(1) == "no \"quoted\"");
  CHECK(data.validationReference(2) == "yes");  // wraps
  CHECK(data.trainBatch(3, 0, 4).inputs.equal(data.trainBatch(3, 0, 4).inputs));

  std::ofstream(train, std::ios::app) << "no tab here\n";
  CHECK_THROWS_WITH(ParallelDataSource(o), Catch::Contains("train.tsv:4") && Catch::Contains("source<TAB>target"));
  o.vocabSize = 258;
  CHECK_THROWS_WITH(ParallelDataSource(o), Catch::Contains("[PAD], [BOS], [EOS]"));
  std::filesystem::remove_all(dir);
}
