#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <map>

#include "stages/models/bert.h"

using namespace skytrain::stages;

namespace {

BertConfig tiny(int outputs = 0) {
  BertConfig c;
  c.vocabSize = 50;
  c.dModel = 32;
  c.heads = 4;
  c.layers = 4;
  c.dFf = 48;
  c.seqLen = 12;
  c.positions = 16;
  c.outputs = outputs;
  return c;
}

}  // namespace

TEST_CASE("BERT cut in three has the whole model's weights and computes its MLM logits") {
  const int outputs = GENERATE(0, 3);
  CAPTURE(outputs);
  auto full = makeBertStage(tiny(outputs), 0, 4, 5);
  auto a = makeBertStage(tiny(outputs), 0, 1, 5);
  auto b = makeBertStage(tiny(outputs), 1, 3, 5);
  auto c = makeBertStage(tiny(outputs), 3, 4, 5);
  std::map<std::string, at::Tensor> reference;
  for (const auto& [name, tensor] : full->stateDict()) reference[name] = tensor;
  size_t seen = 0;
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, tensor] : part->stateDict()) {
      INFO(name);
      const std::string whole = name == "head.weight" ? "tok_emb.weight" : name;  // the decoder's copy
      REQUIRE(reference.count(whole));
      CHECK(torch::equal(reference.at(whole), tensor));
      seen += name == "head.weight" ? 0 : 1;
    }
  }
  CHECK(seen == reference.size());
  int64_t counted = 0;
  for (const auto& p : full->parameters()) counted += p.numel();
  CHECK(counted == bertParameterCount(tiny(outputs), 0, 4));
  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  at::Tensor x = ids;
  for (auto* part : {a.get(), b.get(), c.get()}) x = part->infer(x);
  const at::Tensor whole = full->infer(ids);
  CHECK(whole.sizes().vec() == std::vector<int64_t>{2, 12, outputs > 0 ? 3 : 50});
  CHECK(torch::allclose(x, whole, 1e-5, 1e-6));
}

TEST_CASE("BERT attends both ways: a later token changes earlier positions") {
  auto model = makeBertStage(tiny(), 0, 4, 3);
  at::Tensor ids = torch::randint(0, 50, {1, 12}, torch::kLong);
  const at::Tensor before = model->infer(ids);
  ids.index_put_({0, 10}, (ids.index({0, 10}) + 1) % 50);
  CHECK_FALSE(torch::allclose(before.narrow(1, 0, 5), model->infer(ids).narrow(1, 0, 5)));
  CHECK_THROWS_WITH(model->infer(torch::zeros({1, 17}, torch::kLong)), Catch::Contains("exceeds the model's 16 positions"));
}
