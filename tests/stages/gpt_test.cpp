#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <map>

#include "scheduler/error.h"
#include "stages/models/gpt.h"

using namespace skytrain::stages;

namespace {

GptConfig tiny() {
  GptConfig c;
  c.vocabSize = 50;
  c.dModel = 32;
  c.heads = 4;
  c.layers = 4;
  c.dFf = 64;
  c.seqLen = 12;
  return c;
}

std::map<std::string, at::Tensor> byName(const Stage& stage) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, tensor] : stage.stateDict()) out[name] = tensor;
  return out;
}

}  // namespace

TEST_CASE("a split model has exactly the unsplit model's weights") {
  auto full = makeGptStage(tiny(), 0, 4, 99);
  auto a = makeGptStage(tiny(), 0, 1, 99);
  auto b = makeGptStage(tiny(), 1, 3, 99);
  auto c = makeGptStage(tiny(), 3, 4, 99);
  const auto reference = byName(*full);
  size_t seen = 0;
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, tensor] : byName(*part)) {
      INFO(name);
      REQUIRE(reference.count(name));
      CHECK(torch::equal(reference.at(name), tensor));
      ++seen;
    }
  }
  CHECK(seen == reference.size());
  CHECK(gptParameterCount(tiny(), 0, 4) ==
        gptParameterCount(tiny(), 0, 1) + gptParameterCount(tiny(), 1, 3) + gptParameterCount(tiny(), 3, 4));
  int64_t counted = 0;
  for (const auto& p : full->parameters()) counted += p.numel();
  CHECK(counted == gptParameterCount(tiny(), 0, 4));
}

TEST_CASE("another seed gives other weights") {
  auto x = byName(*makeGptStage(tiny(), 0, 4, 1));
  auto y = byName(*makeGptStage(tiny(), 0, 4, 2));
  CHECK_FALSE(torch::equal(x.at("block2.attn.qkv.weight"), y.at("block2.attn.qkv.weight")));
}

TEST_CASE("chained stages compute the unsplit model's output and gradients") {
  torch::manual_seed(0);
  const at::Tensor ids = torch::randint(0, 50, {3, 12}, torch::kLong);
  const at::Tensor gradLogits = torch::randn({3, 12, 50});
  auto full = makeGptStage(tiny(), 0, 4, 7);
  auto head = makeGptStage(tiny(), 0, 2, 7);
  auto tail = makeGptStage(tiny(), 2, 4, 7);

  const at::Tensor expected = full->forward(0, ids);
  CHECK(full->backward(0, gradLogits).defined() == false);  // token ids have no gradient

  const at::Tensor hidden = head->forward(5, ids);
  const at::Tensor logits = tail->forward(5, hidden);
  CHECK(torch::allclose(logits, expected, 1e-5, 1e-5));
  CHECK(tail->inFlight() == 1);
  const at::Tensor gradHidden = tail->backward(5, gradLogits);
  REQUIRE(gradHidden.defined());
  head->backward(5, gradHidden);
  CHECK(tail->inFlight() == 0);

  auto fullGrads = std::map<std::string, at::Tensor>();
  for (const auto& [name, p] : full->stateDict()) fullGrads[name] = p.grad();
  for (const auto* part : {head.get(), tail.get()}) {
    for (const auto& [name, p] : part->stateDict()) {
      INFO(name);
      CHECK(torch::allclose(p.grad(), fullGrads.at(name), 1e-4, 1e-6));
    }
  }
}

TEST_CASE("micro-batches may be in flight together and finish in any order") {
  auto stage = makeGptStage(tiny(), 1, 3, 7);
  const at::Tensor x0 = torch::randn({2, 12, 32}), x1 = torch::randn({2, 12, 32});
  stage->forward(0, x0);
  stage->forward(1, x1);
  CHECK(stage->inFlight() == 2);
  CHECK(stage->backward(1, torch::ones({2, 12, 32})).sizes() == x1.sizes());
  CHECK(stage->backward(0, torch::ones({2, 12, 32})).sizes() == x0.sizes());
  CHECK_THROWS_AS(stage->backward(0, torch::ones({2, 12, 32})), skytrain::InternalError);
}

TEST_CASE("the zero-bubble split: input gradients at once, weight gradients in the W pass, the same sums") {
  torch::manual_seed(1);
  const at::Tensor x0 = torch::randn({2, 12, 32}), x1 = torch::randn({2, 12, 32});
  const at::Tensor g0 = torch::randn({2, 12, 50}), g1 = torch::randn({2, 12, 50});
  auto plain = makeGptStage(tiny(), 2, 4, 7);
  auto split = makeGptStage(tiny(), 2, 4, 7);
  REQUIRE(split->setSplitBackward(true));
  plain->forward(0, x0), plain->forward(1, x1);
  split->forward(0, x0), split->forward(1, x1);
  const at::Tensor d0 = plain->backward(0, g0), d1 = plain->backward(1, g1);
  CHECK(torch::equal(split->backward(0, g0), d0));
  CHECK(torch::equal(split->backward(1, g1), d1));
  // Before the W pass the linear layers' weights have no gradient; the norms' already do.
  auto pending = byName(*split);
  CHECK_FALSE(pending.at("block2.fc.weight").grad().defined());
  CHECK(pending.at("block2.ln1.weight").grad().defined());
  CHECK(split->inFlight() == 2);  // two W passes pending
  split->backwardWeights(0);
  split->backwardWeights(1);
  CHECK(split->inFlight() == 0);
  split->backwardWeights(1);  // nothing left: a no-op
  const auto expected = byName(*plain);
  for (const auto& [name, p] : byName(*split)) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(torch::allclose(p.grad(), expected.at(name).grad(), 1e-6, 1e-7));
  }
}

TEST_CASE("bad ranges, configs and inputs are refused") {
  CHECK_THROWS_AS(makeGptStage(tiny(), 2, 2, 0), skytrain::Error);
  CHECK_THROWS_AS(makeGptStage(tiny(), 0, 5, 0), skytrain::Error);
  GptConfig odd = tiny();
  odd.heads = 5;
  CHECK_THROWS_WITH(makeGptStage(odd, 0, 4, 0), Catch::Contains("divisible"));
  auto first = makeGptStage(tiny(), 0, 2, 0);
  CHECK_THROWS_WITH(first->forward(0, torch::randn({2, 12})), Catch::Contains("token ids"));
  CHECK_THROWS_WITH(first->forward(1, torch::zeros({2, 13}, torch::kLong)), Catch::Contains("sequence length"));
  auto middle = makeGptStage(tiny(), 1, 3, 0);
  middle->forward(0, torch::randn({2, 12, 32}));
  CHECK_THROWS_WITH(middle->backward(0, torch::randn({2, 11, 32})), Catch::Contains("shape"));
}

namespace {

GptConfig withSplit(int block, SplitPoint::Layer layer, int rank, bool keepResidual) {
  GptConfig c = tiny();
  c.split.block = block;
  c.split.layer = layer;
  c.split.rank = rank;
  c.split.keepResidual = keepResidual;
  return c;
}

}  // namespace

TEST_CASE("a full-rank split point with its residual kept leaves the outputs unchanged") {
  const auto layer = GENERATE(SplitPoint::Layer::Fc, SplitPoint::Layer::Proj);
  const GptConfig c = withSplit(1, layer, 32, true);  // min(d_model 32, d_ff 64)
  torch::manual_seed(2);
  const at::Tensor ids = torch::randint(0, 50, {3, 12}, torch::kLong);
  const at::Tensor expected = makeGptStage(tiny(), 0, 4, 7)->infer(ids);
  // In one stage, and cut at the split point across two.
  CHECK(torch::allclose(makeGptStage(c, 0, 4, 7)->infer(ids), expected, 1e-4, 1e-4));
  auto front = makeGptStage(c, 0, 2, 7), back = makeGptStage(c, 2, 4, 7);
  const at::Tensor boundary = front->infer(ids);
  CHECK(boundary.size(-1) == 32 + 32);  // r values plus the residual
  CHECK(torch::allclose(back->infer(boundary), expected, 1e-4, 1e-4));
}

TEST_CASE("a rank-8 split point sends r numbers per token across the boundary") {
  const GptConfig c = withSplit(1, SplitPoint::Layer::Fc, 8, false);
  auto front = makeGptStage(c, 0, 2, 7), back = makeGptStage(c, 2, 4, 7);
  const at::Tensor ids = torch::randint(0, 50, {3, 12}, torch::kLong);
  const at::Tensor boundary = front->forward(0, ids);
  CHECK(boundary.sizes() == torch::IntArrayRef({3, 12, 8}));  // 8 of d_model 32 per token
  const at::Tensor logits = back->forward(0, boundary);
  CHECK(logits.sizes() == torch::IntArrayRef({3, 12, 50}));
  const at::Tensor gradBoundary = back->backward(0, torch::ones_like(logits));
  CHECK(gradBoundary.sizes() == boundary.sizes());
  front->backward(0, gradBoundary);
  // The two halves agree on the factors: V on the front, S and U on the back.
  auto names = byName(*front);
  CHECK(names.count("block1.fc_v.weight"));
  CHECK_FALSE(names.count("block1.fc_u.weight"));
  CHECK(byName(*back).count("block1.fc_u.weight"));
  CHECK(byName(*back).at("block1.fc_s.weight").diag().min().item<double>() > 0);
  // The product U S V is the best rank-8 approximation of the unfactored layer.
  auto full = byName(*makeGptStage(tiny(), 0, 4, 7));
  const at::Tensor w = full.at("block1.fc.weight");
  const at::Tensor product = torch::mm(byName(*back).at("block1.fc_u.weight"),
                                       torch::mm(byName(*back).at("block1.fc_s.weight"), names.at("block1.fc_v.weight")));
  const auto s = std::get<1>(torch::linalg_svd(w, false));
  const double optimal = s.narrow(0, 8, s.size(0) - 8).pow(2).sum().sqrt().item<double>();
  CHECK((product - w).norm().item<double>() == Approx(optimal).epsilon(1e-3));
}

TEST_CASE("bad split points are refused") {
  CHECK_THROWS_WITH(makeGptStage(withSplit(4, SplitPoint::Layer::Fc, 8, false), 0, 4, 0), Catch::Contains("block 4"));
  CHECK_THROWS_WITH(makeGptStage(withSplit(1, SplitPoint::Layer::Fc, 33, false), 0, 4, 0), Catch::Contains("rank 33"));
}

TEST_CASE("a loss over masked targets only is zero, with a zero gradient, not NaN") {
  auto stage = makeGptStage(tiny(), 0, 4, 7);
  // As the runner does: the loss's gradient is taken w.r.t. the stage's (detached) output.
  const at::Tensor logits = stage->forward(0, torch::randint(0, 50, {1, 12}, torch::kLong)).detach().requires_grad_(true);
  const at::Tensor none = torch::full({1, 12}, -100, torch::kLong);  // a short masked-LM sample with no mask drawn
  const at::Tensor loss = stage->loss(logits, none);
  CHECK(loss.item<double>() == 0.0);
  const at::Tensor grad = torch::autograd::grad({loss}, {logits})[0];
  CHECK(grad.abs().max().item<double>() == 0.0);
  at::Tensor some = none.clone();
  some[0][3] = 7;
  CHECK(std::isfinite(stage->loss(logits, some).item<double>()));
  CHECK(stage->loss(logits, some).item<double>() > 0.0);
}

TEST_CASE("block recompute trains bit for bit as keeping the activations does, with less stashed") {
  // Two micro-batches in flight, dropout on (the replay must draw what the first run drew),
  // on a first stage (token ids in) and a last stage (logits out); also under the zero-bubble
  // split, whose deferred weight gradients the replay must feed.
  for (const bool zeroBubble : {false, true}) {
    for (const int first : {0, 2}) {
      INFO("first block " << first << (zeroBubble ? ", zero-bubble split" : ""));
      GptConfig c = tiny();
      c.dropout = 0.1;
      GptConfig r = c;
      r.recompute = true;
      auto kept = makeGptStage(c, first, first + 2, 7);
      auto replayed = makeGptStage(r, first, first + 2, 7);
      if (zeroBubble) {
        REQUIRE(kept->setSplitBackward(true));
        REQUIRE(replayed->setSplitBackward(true));
      }
      torch::manual_seed(3);
      const at::Tensor x0 = first == 0 ? torch::randint(0, 50, {2, 12}) : torch::randn({2, 12, 32}, torch::requires_grad());
      const at::Tensor x1 = first == 0 ? torch::randint(0, 50, {2, 12}) : torch::randn({2, 12, 32}, torch::requires_grad());
      const at::Tensor g = torch::randn({2, 12, first == 0 ? 32 : 50});
      std::vector<at::Tensor> outs[2], grads[2];
      int k = 0;
      for (Stage* s : {kept.get(), replayed.get()}) {
        torch::manual_seed(11);
        outs[k].push_back(s->forward(0, x0));
        outs[k].push_back(s->forward(1, x1));
        torch::manual_seed(12);  // the backward's own stream: the replay must not disturb it
        grads[k].push_back(s->backward(1, g));
        grads[k].push_back(s->backward(0, g * 2));
        if (zeroBubble) s->backwardWeights(1), s->backwardWeights(0);
        outs[k].push_back(torch::rand({4}));  // where the generator stands afterwards
        ++k;
      }
      for (size_t i = 0; i < outs[0].size(); ++i) CHECK(torch::equal(outs[0][i], outs[1][i]));
      for (size_t i = 0; i < grads[0].size(); ++i) {
        CHECK(grads[0][i].defined() == grads[1][i].defined());
        if (grads[0][i].defined()) CHECK(torch::equal(grads[0][i], grads[1][i]));
      }
      const auto expected = byName(*kept);
      for (const auto& [name, p] : byName(*replayed)) {
        INFO(name);
        REQUIRE(p.grad().defined());
        CHECK(torch::equal(p.grad(), expected.at(name).grad()));
      }
      CHECK(gptStashBytesPerSample(r, first, first + 2) < gptStashBytesPerSample(c, first, first + 2));
    }
  }
}

TEST_CASE("a bf16 stage: fp32 weights, gradients and output, bf16 matrix products, recompute still exact") {
  GptConfig c = tiny();
  GptConfig r = c;
  r.recompute = true;
  auto fp32 = makeGptStage(c, 2, 4, 7);
  auto bf16 = makeGptStage(c, 2, 4, 7);
  auto bf16Replayed = makeGptStage(r, 2, 4, 7);
  REQUIRE(bf16->setAutocast(Autocast::BFloat16));
  REQUIRE(bf16Replayed->setAutocast(Autocast::BFloat16));
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({2, 12, 32}), g = torch::randn({2, 12, 50});
  const at::Tensor y32 = fp32->forward(0, x), y16 = bf16->forward(0, x), y16r = bf16Replayed->forward(0, x);
  CHECK(y16.scalar_type() == at::kFloat);
  CHECK_FALSE(torch::equal(y16, y32));  // it did compute in bf16
  CHECK(torch::allclose(y16, y32, 0.05, 0.05));
  CHECK(torch::equal(y16, y16r));
  const at::Tensor d32 = fp32->backward(0, g), d16 = bf16->backward(0, g), d16r = bf16Replayed->backward(0, g);
  CHECK(d16.scalar_type() == at::kFloat);
  CHECK(torch::equal(d16, d16r));
  const auto expected = byName(*bf16);
  for (const auto& [name, p] : byName(*bf16Replayed)) {
    INFO(name);
    CHECK(p.scalar_type() == at::kFloat);
    CHECK(p.grad().scalar_type() == at::kFloat);
    CHECK(torch::equal(p.grad(), expected.at(name).grad()));
  }
  CHECK(torch::equal(bf16->infer(x), y16));
}

TEST_CASE("a bf16 stage under the zero-bubble split computes what it computes without it") {
  auto plain = makeGptStage(tiny(), 2, 4, 7);
  auto split = makeGptStage(tiny(), 2, 4, 7);
  REQUIRE(plain->setAutocast(Autocast::BFloat16));
  REQUIRE(split->setAutocast(Autocast::BFloat16));
  REQUIRE(split->setSplitBackward(true));
  torch::manual_seed(5);
  const at::Tensor x = torch::randn({2, 12, 32}), g = torch::randn({2, 12, 50});
  CHECK(torch::equal(plain->forward(0, x), split->forward(0, x)));
  CHECK(torch::equal(plain->backward(0, g), split->backward(0, g)));
  split->backwardWeights(0);
  const auto expected = byName(*plain);
  for (const auto& [name, p] : byName(*split)) {
    INFO(name);
    CHECK(torch::equal(p.grad(), expected.at(name).grad()));
  }
}
