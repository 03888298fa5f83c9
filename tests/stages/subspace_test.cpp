// A subspace GPT (GptConfig::subspaceRank): cut anywhere, k numbers a token cross each way,
// and the stages compose to the unsplit model.
#include <catch2/catch.hpp>
#include <torch/torch.h>
#include <xxhash.h>

#include <map>
#include <string>
#include <vector>

#include "scheduler/error.h"
#include "stages/models/gpt.h"
#include "stages/models/llama.h"
#include "stages/weights.h"

using namespace skytrain::stages;

namespace {

constexpr int kRank = 4;

GptConfig tiny() {
  GptConfig c;
  c.vocabSize = 50;
  c.dModel = 32;
  c.heads = 4;
  c.layers = 4;
  c.dFf = 64;
  c.seqLen = 12;
  c.subspaceRank = kRank;
  return c;
}

std::map<std::string, at::Tensor> byName(const NamedTensors& tensors) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, tensor] : tensors) out[name] = tensor;
  return out;
}

}  // namespace

TEST_CASE("a subspace model cut in three computes the unsplit model's output, k numbers a token at each cut") {
  torch::manual_seed(0);
  const at::Tensor ids = torch::randint(0, 50, {3, 12}, torch::kLong);
  const at::Tensor gradLogits = torch::randn({3, 12, 50});
  auto full = makeGptStage(tiny(), 0, 4, 7);
  auto a = makeGptStage(tiny(), 0, 1, 7);
  auto b = makeGptStage(tiny(), 1, 3, 7);
  auto c = makeGptStage(tiny(), 3, 4, 7);
  CHECK(gptInputShape(tiny(), 1, 3) == std::vector<int64_t>{3, 12, kRank});
  CHECK(gptInputShape(tiny(), 3, 3) == std::vector<int64_t>{3, 12, kRank});

  // The same weights, and the same frozen frame in every stage.
  const auto reference = byName(full->stateDict());
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, tensor] : part->stateDict()) {
      INFO(name);
      REQUIRE(reference.count(name));
      CHECK(torch::equal(reference.at(name), tensor));
    }
  }

  const at::Tensor expected = full->forward(0, ids);
  const at::Tensor first = a->forward(0, ids);
  CHECK(first.sizes() == c10::IntArrayRef({3, 12, kRank}));
  b->setTokens(ids);
  const at::Tensor second = b->forward(0, first);
  CHECK(second.sizes() == c10::IntArrayRef({3, 12, kRank}));
  c->setTokens(ids);
  const at::Tensor logits = c->forward(0, second);
  CHECK(torch::equal(logits, expected));  // every stage rebuilds h exactly as the unsplit model does

  // Backward: the gradient crossing each cut is k wide too.
  full->backward(0, gradLogits);
  const at::Tensor gradSecond = c->backward(0, gradLogits);
  CHECK(gradSecond.sizes() == c10::IntArrayRef({3, 12, kRank}));
  const at::Tensor gradFirst = b->backward(0, gradSecond);
  CHECK(gradFirst.sizes() == c10::IntArrayRef({3, 12, kRank}));
  CHECK_FALSE(a->backward(0, gradFirst).defined());
  const auto fullParams = byName(full->namedParameters());
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, p] : part->namedParameters()) {
      INFO(name);
      REQUIRE(p.grad().defined());
      CHECK(torch::allclose(p.grad(), fullParams.at(name).grad(), 1e-5, 1e-7));
    }
  }
}

TEST_CASE("the frame is fixed: an orthonormal basis and frozen tables, no optimizer state; the rest is k wide") {
  auto full = makeGptStage(tiny(), 0, 4, 7);
  const auto state = byName(full->stateDict());
  const at::Tensor basis = state.at("subspace.basis");
  CHECK(basis.sizes() == c10::IntArrayRef({32, kRank}));
  CHECK(torch::allclose(basis.t().matmul(basis), torch::eye(kRank), 1e-5, 1e-6));
  CHECK(state.at("subspace.tokens").sizes() == c10::IntArrayRef({50, 32}));
  CHECK(state.at("tok_emb.weight").sizes() == c10::IntArrayRef({50, kRank}));
  CHECK(state.at("pos_emb").sizes() == c10::IntArrayRef({12, kRank}));
  CHECK(state.at("block2.attn.proj.weight").sizes() == c10::IntArrayRef({kRank, 32}));
  CHECK(state.at("block2.proj.weight").sizes() == c10::IntArrayRef({kRank, 64}));
  int64_t trained = 0;
  for (const auto& p : full->parameters()) trained += p.numel();
  const int64_t frame = 50 * 32 + 12 * 32 + 32 * kRank;
  CHECK(trained + frame == gptParameterCount(tiny(), 0, 4));
  CHECK(gptParameterCount(tiny(), 0, 4) + 2 * frame ==
        gptParameterCount(tiny(), 0, 1) + gptParameterCount(tiny(), 1, 3) + gptParameterCount(tiny(), 3, 4));
  // Another seed, another frame.
  auto other = byName(makeGptStage(tiny(), 0, 4, 8)->stateDict());
  CHECK_FALSE(torch::equal(other.at("subspace.basis"), basis));
}

TEST_CASE("a subspace stage refuses input it cannot rebuild h from") {
  auto b = makeGptStage(tiny(), 1, 3, 7);
  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  // No token ids given.
  CHECK_THROWS_WITH(b->forward(0, torch::randn({2, 12, kRank})), Catch::Contains("needs the token ids"));
  b->setTokens(ids);
  CHECK_THROWS_WITH(b->forward(1, torch::randn({2, 12, 32})), Catch::Contains("expects coefficients [batch, seq, 4]"));
  b->setTokens(torch::randint(0, 50, {3, 12}, torch::kLong));  // another micro-batch's ids
  CHECK_THROWS_WITH(b->forward(2, torch::randn({2, 12, kRank})), Catch::Contains("needs the token ids"));
  CHECK(b->inFlight() == 0);

  GptConfig bad = tiny();
  bad.subspaceRank = 33;
  CHECK_THROWS_AS(makeGptStage(bad, 0, 4, 1), skytrain::Error);
  bad = tiny();
  bad.split.block = 1;
  CHECK_THROWS_WITH(makeGptStage(bad, 0, 4, 1), Catch::Contains("subspace"));
}

TEST_CASE("a subspace LLaMA cut in three computes the unsplit model, k numbers a token at each cut") {
  LlamaConfig c;
  c.vocabSize = 50;
  c.dModel = 32;
  c.heads = 4;
  c.kvHeads = 2;
  c.layers = 4;
  c.dFf = 48;
  c.seqLen = 12;
  c.subspaceRank = kRank;
  torch::manual_seed(1);
  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  const at::Tensor gradLogits = torch::randn({2, 12, 50});
  auto full = makeLlamaStage(c, 0, 4, 5);
  auto a = makeLlamaStage(c, 0, 1, 5), b = makeLlamaStage(c, 1, 3, 5), z = makeLlamaStage(c, 3, 4, 5);
  CHECK(llamaInputShape(c, 2, 2) == std::vector<int64_t>{2, 12, kRank});
  const at::Tensor expected = full->forward(0, ids);
  const at::Tensor first = a->forward(0, ids);
  CHECK(first.sizes() == c10::IntArrayRef({2, 12, kRank}));
  b->setTokens(ids);
  const at::Tensor second = b->forward(0, first);
  z->setTokens(ids);
  CHECK(torch::equal(z->forward(0, second), expected));
  full->backward(0, gradLogits);
  const at::Tensor gradSecond = z->backward(0, gradLogits);
  CHECK(gradSecond.sizes() == c10::IntArrayRef({2, 12, kRank}));
  a->backward(0, b->backward(0, gradSecond));
  const auto fullParams = byName(full->namedParameters());
  int64_t trained = 0;
  for (const auto* part : {a.get(), b.get(), z.get()}) {
    for (const auto& [name, p] : part->namedParameters()) {
      INFO(name);
      CHECK(torch::allclose(p.grad(), fullParams.at(name).grad(), 1e-5, 1e-7));
    }
  }
  for (const auto& p : full->parameters()) trained += p.numel();
  CHECK(trained + 50 * 32 + 32 * kRank == llamaParameterCount(c, 0, 4));  // + the frozen frame
  CHECK(byName(full->stateDict()).at("block1.attn.o.weight").sizes() == c10::IntArrayRef({kRank, 32}));
  CHECK(byName(full->stateDict()).at("block1.mlp.down.weight").sizes() == c10::IntArrayRef({kRank, 48}));
  // Without ids after the first stage, refused.
  auto lone = makeLlamaStage(c, 1, 3, 5);
  CHECK_THROWS_WITH(lone->forward(0, first), Catch::Contains("needs the token ids"));
}

TEST_CASE("a tied subspace model: the head is the frozen token table plus the k-wide embedding, a copy [vocab, k] cut apart") {
  for (const bool llama : {false, true}) {
    CAPTURE(llama);
    GptConfig g = tiny();
    g.tieEmbeddings = true;
    LlamaConfig l;
    l.vocabSize = 50, l.dModel = 32, l.heads = 4, l.kvHeads = 2, l.layers = 4, l.dFf = 48, l.seqLen = 12;
    l.subspaceRank = kRank, l.tieEmbeddings = true;
    const auto make = [&](int first, int last) { return llama ? makeLlamaStage(l, first, last, 5) : makeGptStage(g, first, last, 5); };
    const auto count = [&](int first, int last) {
      return llama ? llamaParameterCount(l, first, last) : gptParameterCount(g, first, last);
    };
    torch::manual_seed(4);
    const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
    const at::Tensor gradLogits = torch::randn({2, 12, 50});
    auto full = make(0, 4);
    auto a = make(0, 1), b = make(1, 3), z = make(3, 4);
    const auto last = byName(z->stateDict()), first = byName(a->stateDict());
    CHECK(last.at("head.weight").sizes() == c10::IntArrayRef({50, kRank}));  // k wide: the tied exchange is too
    CHECK(torch::equal(last.at("head.weight"), first.at("tok_emb.weight")));  // the copy starts equal
    CHECK_FALSE(byName(full->stateDict()).count("head.weight"));  // one stage: the embedding itself
    const at::Tensor expected = full->forward(0, ids);
    b->setTokens(ids);
    z->setTokens(ids);
    CHECK(torch::equal(z->forward(0, b->forward(0, a->forward(0, ids))), expected));
    // The copies' gradients add up to the one matrix's.
    full->backward(0, gradLogits);
    a->backward(0, b->backward(0, z->backward(0, gradLogits)));
    const at::Tensor summed = byName(a->namedParameters()).at("tok_emb.weight").grad() +
                              byName(z->namedParameters()).at("head.weight").grad();
    CHECK(torch::allclose(summed, byName(full->namedParameters()).at("tok_emb.weight").grad(), 1e-5, 1e-7));
    int64_t trained = 0;
    for (const auto& p : z->parameters()) trained += p.numel();
    const int64_t frame = 50 * 32 + (llama ? 0 : 12 * 32) + 32 * kRank;
    CHECK(trained + frame == count(3, 4));
    CHECK(count(0, 4) + 2 * frame + 50 * kRank == count(0, 1) + count(1, 3) + count(3, 4));
  }
}

TEST_CASE("block recompute of a subspace model trains bit for bit as keeping the activations does") {
  // GPT with dropout (the replay draws what the first run drew) and LLaMA; a first stage
  // (token ids in) and a middle one (coefficients and ids in), two micro-batches in flight.
  for (const bool llama : {false, true}) {
    for (const int first : {0, 1}) {
      INFO((llama ? "llama" : "gpt") << ", first block " << first);
      auto make = [&](bool recompute) {
        if (llama) {
          LlamaConfig c;
          c.vocabSize = 50, c.dModel = 32, c.heads = 4, c.kvHeads = 2, c.layers = 4, c.dFf = 48, c.seqLen = 12;
          c.subspaceRank = kRank, c.recompute = recompute;
          return makeLlamaStage(c, first, first + 2, 7);
        }
        GptConfig c = tiny();
        c.dropout = 0.1, c.recompute = recompute;
        return makeGptStage(c, first, first + 2, 7);
      };
      auto kept = make(false), replayed = make(true);
      torch::manual_seed(3);
      const at::Tensor ids0 = torch::randint(0, 50, {2, 12}), ids1 = torch::randint(0, 50, {2, 12});
      const at::Tensor x0 = first == 0 ? ids0 : torch::randn({2, 12, kRank}, torch::requires_grad());
      const at::Tensor x1 = first == 0 ? ids1 : torch::randn({2, 12, kRank}, torch::requires_grad());
      const at::Tensor g = torch::randn({2, 12, kRank});
      std::vector<at::Tensor> outs[2], grads[2];
      int k = 0;
      for (Stage* s : {kept.get(), replayed.get()}) {
        torch::manual_seed(11);
        s->setTokens(ids0);
        outs[k].push_back(s->forward(0, x0));
        s->setTokens(ids1);
        outs[k].push_back(s->forward(1, x1));
        torch::manual_seed(12);
        grads[k].push_back(s->backward(1, g));
        grads[k].push_back(s->backward(0, g * 2));
        ++k;
      }
      for (size_t i = 0; i < outs[0].size(); ++i) CHECK(torch::equal(outs[0][i], outs[1][i]));
      for (size_t i = 0; i < grads[0].size(); ++i) {
        CHECK(grads[0][i].defined() == grads[1][i].defined());
        if (grads[0][i].defined()) CHECK(torch::equal(grads[0][i], grads[1][i]));
      }
      const auto expected = byName(kept->namedParameters());
      for (const auto& [name, p] : replayed->namedParameters()) {
        INFO(name);
        REQUIRE(p.grad().defined());
        CHECK(torch::equal(p.grad(), expected.at(name).grad()));
      }
    }
  }
}

namespace {

// A lookup over a stage's own tensors, as initialiseFrom gets one from a file.
TensorLookup lookupOf(const Stage& stage) {
  return [tensors = byName(stage.stateDict())](const std::string& name) {
    const auto it = tensors.find(name);
    return it == tensors.end() ? at::Tensor() : it->second;
  };
}

}  // namespace

TEST_CASE("a pretrained GPT converts into the subspace form: the same model at k = d_model, one frame in every stage") {
  GptConfig plain = tiny();
  plain.subspaceRank = 0;
  auto pretrained = makeGptStage(plain, 0, 4, 3);
  const TensorLookup file = lookupOf(*pretrained);
  torch::manual_seed(2);
  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  const at::Tensor expected = pretrained->forward(0, ids);

  // k = d_model: U spans everything, so the converted model is the pretrained one.
  GptConfig whole = tiny();
  whole.subspaceRank = 32;
  auto converted = makeGptStage(whole, 0, 4, 9);
  const InitResult loaded = initialiseFrom(*converted, file, "pretrained");
  CHECK(loaded.fromSeed.empty());
  CHECK(torch::allclose(converted->forward(0, ids), expected, 1e-4, 1e-5));

  // k < d_model, cut in three: every stage derives the same frame, and the cuts compose.
  auto full = makeGptStage(tiny(), 0, 4, 9);
  auto a = makeGptStage(tiny(), 0, 1, 9), b = makeGptStage(tiny(), 1, 3, 9), c = makeGptStage(tiny(), 3, 4, 9);
  for (auto* stage : {full.get(), a.get(), b.get(), c.get()}) initialiseFrom(*stage, file, "pretrained");
  const auto reference = byName(full->stateDict());
  for (const auto* part : {a.get(), b.get(), c.get()}) {
    for (const auto& [name, tensor] : part->stateDict()) {
      INFO(name);
      CHECK(torch::equal(reference.at(name), tensor));
    }
  }
  b->setTokens(ids);
  c->setTokens(ids);
  CHECK(torch::equal(c->forward(0, b->forward(0, a->forward(0, ids))), full->forward(0, ids)));

  // What the conversion made: U orthonormal and seed-independent (another seed, the same U),
  // h starts as the pretrained embedding, each output projection is UᵀW.
  const at::Tensor basis = reference.at("subspace.basis");
  CHECK(torch::allclose(basis.t().matmul(basis), torch::eye(kRank), 1e-5, 1e-6));
  auto again = makeGptStage(tiny(), 0, 4, 10);
  initialiseFrom(*again, file, "pretrained");
  CHECK(torch::equal(byName(again->stateDict()).at("subspace.basis"), basis));
  const auto source = byName(pretrained->stateDict());
  const at::Tensor h0 = reference.at("subspace.tokens") + reference.at("tok_emb.weight").matmul(basis.t());
  CHECK(torch::allclose(h0, source.at("tok_emb.weight"), 1e-5, 1e-6));
  const at::Tensor p0 = reference.at("subspace.positions") + reference.at("pos_emb").matmul(basis.t());
  CHECK(torch::allclose(p0, source.at("pos_emb"), 1e-5, 1e-6));
  CHECK(torch::allclose(reference.at("block2.proj.weight"), basis.t().matmul(source.at("block2.proj.weight")), 1e-5, 1e-6));
  CHECK(torch::allclose(reference.at("block1.attn.proj.bias"), basis.t().matmul(source.at("block1.attn.proj.bias")), 1e-5, 1e-6));
  // U holds the writers' strongest directions: more of their energy than a drawn basis holds.
  std::vector<at::Tensor> parts;
  for (int i = 0; i < 4; ++i) {
    for (const char* w : {".attn.proj.weight", ".proj.weight"}) parts.push_back(source.at("block" + std::to_string(i) + w));
  }
  const at::Tensor writers = torch::cat(parts, 1);
  const at::Tensor drawn = byName(makeGptStage(tiny(), 0, 1, 9)->stateDict()).at("subspace.basis");
  CHECK(basis.t().matmul(writers).norm().item<double>() > drawn.t().matmul(writers).norm().item<double>());

  // A subspace model's own file loads by name, frame included (no conversion).
  auto reloaded = makeGptStage(tiny(), 0, 4, 11);
  initialiseFrom(*reloaded, lookupOf(*full), "subspace export");
  for (const auto& [name, tensor] : reloaded->stateDict()) CHECK(torch::equal(reference.at(name), tensor));

  // A file without every block's output projection is refused, naming it (a stage converts
  // with all of them, not only its own).
  const TensorLookup partial = [&](const std::string& name) {
    return name.rfind("block3.", 0) == 0 ? at::Tensor() : file(name);
  };
  auto first = makeGptStage(tiny(), 0, 1, 9);
  CHECK_THROWS_WITH(initialiseFrom(*first, partial, "part"), Catch::Contains("block3.attn.proj.weight: not in the file"));
  // Crafted files: each refused naming the tensor, as a skytrain::Error (no stage is built).
  const auto crafted = [&](const std::string& target, const at::Tensor& value) {
    return TensorLookup([&, target, value](const std::string& name) { return name == target ? value : file(name); });
  };
  const auto refusal = [&](const TensorLookup& lookup) {
    auto stage = makeGptStage(tiny(), 1, 3, 9);
    try {
      initialiseFrom(*stage, lookup, "crafted");
    } catch (const skytrain::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const at::Tensor poisoned = source.at("block0.proj.weight").clone().index_put_({0, 0}, NAN);
  CHECK_THAT(refusal(crafted("block0.proj.weight", poisoned)), Catch::Contains("block0.proj.weight: the file's holds a NaN"));
  CHECK_THAT(refusal(crafted("block0.proj.weight", torch::zeros({31, 64}))),
             Catch::Contains("block0.proj.weight: the file's is [31, 64], expected [32, n]"));
  CHECK_THAT(refusal(crafted("block1.proj.weight", torch::zeros({32, 63}))),  // the stage's own: its width too
             Catch::Contains("block1.proj.weight: the file's is [32, 63], expected [32, 64]"));
  CHECK_THAT(refusal(crafted("block2.attn.proj.bias", torch::zeros({33}))), Catch::Contains("block2.attn.proj.bias"));
  CHECK_THAT(refusal(crafted("tok_emb.weight", torch::full({50, 32}, INFINITY))),
             Catch::Contains("tok_emb.weight: the file's holds a NaN or an infinity"));
  CHECK_THAT(refusal(crafted("block3.proj.weight", torch::full({32, 64}, 1e200, torch::kDouble))),
             Catch::Contains("overflows float64"));

  // A tied pretrained model into a tied subspace model, cut in two: at k = d_model its logits,
  // and the last stage's copy [vocab, k] equals the first stage's embedding.
  GptConfig tiedPlain = plain, tiedWhole = whole;
  tiedPlain.tieEmbeddings = tiedWhole.tieEmbeddings = true;
  auto tiedPretrained = makeGptStage(tiedPlain, 0, 4, 3);
  auto front = makeGptStage(tiedWhole, 0, 2, 9), back = makeGptStage(tiedWhole, 2, 4, 9);
  initialiseFrom(*front, lookupOf(*tiedPretrained), "tied");
  initialiseFrom(*back, lookupOf(*tiedPretrained), "tied");
  back->setTokens(ids);
  CHECK(torch::allclose(back->forward(0, front->forward(0, ids)), tiedPretrained->forward(0, ids), 1e-4, 1e-5));
  CHECK(torch::equal(byName(back->stateDict()).at("head.weight"), byName(front->stateDict()).at("tok_emb.weight")));
  // An untied file into a tied subspace model would lose its head: refused.
  auto tiedBack = makeGptStage(tiedWhole, 2, 4, 9);
  CHECK_THROWS_WITH(initialiseFrom(*tiedBack, file, "untied"), Catch::Contains("the file's head is not its embedding"));
}

TEST_CASE("a pretrained LLaMA converts into the subspace form: o and down write into U") {
  LlamaConfig c;
  c.vocabSize = 50;
  c.dModel = 32;
  c.heads = 4;
  c.kvHeads = 2;
  c.layers = 2;
  c.dFf = 48;
  c.seqLen = 12;
  auto pretrained = makeLlamaStage(c, 0, 2, 4);
  torch::manual_seed(3);
  const at::Tensor ids = torch::randint(0, 50, {2, 12}, torch::kLong);
  c.subspaceRank = 32;
  auto whole = makeLlamaStage(c, 0, 2, 6);
  initialiseFrom(*whole, lookupOf(*pretrained), "pretrained");
  CHECK(torch::allclose(whole->forward(0, ids), pretrained->forward(0, ids), 1e-4, 1e-5));
  c.subspaceRank = kRank;
  auto first = makeLlamaStage(c, 0, 1, 6), second = makeLlamaStage(c, 1, 2, 6);
  initialiseFrom(*first, lookupOf(*pretrained), "pretrained");
  initialiseFrom(*second, lookupOf(*pretrained), "pretrained");
  const auto a = byName(first->stateDict()), b = byName(second->stateDict());
  CHECK(torch::equal(a.at("subspace.basis"), b.at("subspace.basis")));
  CHECK(torch::equal(a.at("subspace.tokens"), b.at("subspace.tokens")));
  CHECK(b.at("block1.mlp.down.weight").sizes() == c10::IntArrayRef({kRank, 48}));
}

TEST_CASE("the drawn frame is the same bits on every machine: integer draws and an fma Gram-Schmidt") {
  // These hashes were computed on an x86-64 VM (AVX2, OpenBLAS); another CPU, BLAS or
  // compiler must give the same bits, or stages on different hardware would disagree.
  const auto state = byName(makeGptStage(tiny(), 0, 4, 7)->stateDict());
  const auto hashOf = [](const at::Tensor& t) {
    const at::Tensor c = t.contiguous();
    return XXH64(c.data_ptr(), c.numel() * c.element_size(), 0);
  };
  CHECK(hashOf(state.at("subspace.tokens")) == 5515308406206477070ull);
  CHECK(hashOf(state.at("subspace.positions")) == 3552692701956319069ull);
  CHECK(hashOf(state.at("subspace.basis")) == 10228103447047861033ull);
  const at::Tensor tokens = state.at("subspace.tokens");
  CHECK(std::abs(tokens.mean().item<double>()) < 0.002);
  CHECK(std::abs(tokens.std().item<double>() - 0.02) < 0.002);
  CHECK(tokens.abs().max().item<double>() <= 0.02 * std::sqrt(12.0));
}
