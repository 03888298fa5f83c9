// A subspace model (model.subspace) across three daemons: it trains like the unsplit model
// in one process, and each cut carries k numbers a token each way.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>

#include "client/commands.h"
#include "client/export/export.h"
#include "daemon_fixture.h"
#include "reference_trainer.h"
#include "stages/models/llama.h"
#include "stages/weights/safetensors.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;

namespace {

constexpr int kRank = 4, kDModel = 32, kBatch = 8, kSeq = 16;

Json subspaceSpec(const std::string& schedule, int microBatches, const TestDaemon& a, const TestDaemon& b,
                  const TestDaemon& c, const std::string& kind = "gpt", const std::string& method = "shared") {
  Json spec = equivalenceSpec(schedule, microBatches, a.control(), b.control());
  spec["name"] = "subspace";
  spec["model"]["kind"] = kind;
  if (kind == "llama") spec["model"]["kv_heads"] = 2;
  // "sender": a code at each cut, each sender with its own next-token loss.
  spec["model"]["subspace"] = {{"rank", kRank}, {"method", method == "shared" ? "shared" : "cut"}};
  if (method == "sender") spec["model"]["subspace"]["sender_loss"] = 0.5;
  spec["stages"] = {{{"daemon", a.control()}, {"layers", {0, 1}}},
                    {{"daemon", b.control()}, {"layers", {1, 3}}},
                    {{"daemon", c.control()}, {"layers", {3, 4}}}};
  return spec;
}

}  // namespace

// Both methods: a shared subspace every block writes into, and a learned code at each cut
// (the one process then holds the two cuts inside it), with and without the senders' own losses.
TEST_CASE("a three-daemon subspace pipeline trains like one process, k numbers a token across each cut",
          "[integration]") {
  TestDaemon a("sa"), b("sb"), c("sc");
  zmq::context_t context;
  const std::string kind = GENERATE(as<std::string>{}, "gpt", "llama");
  const std::string method = GENERATE(as<std::string>{}, "shared", "cut", "sender");
  const Trained reference = trainReference(subspaceSpec("gpipe", 1, a, b, c, kind, method));
  const std::string schedule = GENERATE(as<std::string>{}, "gpipe", "1f1b");
  const int m = GENERATE(1, 2);
  CAPTURE(kind, method, schedule, m);
  const Json status = runJob(context, a.control(), subspaceSpec(schedule, m, a, b, c, kind, method));
  REQUIRE(status["state"] == "succeeded");
  REQUIRE(status["steps"].size() == kEquivalenceSteps);
  // Each step says how much of the state it rebuilds each code carries (by the layer the cut
  // is before); the shared subspace has no code to report.
  for (const auto& row : status["steps"]) {
    INFO(row.dump());
    if (method != "shared") {
      REQUIRE(row.contains("code_share"));
      CHECK(row["code_share"].size() == 2);
      for (const char* layer : {"1", "3"}) CHECK(row["code_share"].value(layer, 0.0) > 0.0);
    } else {
      CHECK_FALSE(row.contains("code_share"));
    }
    // ... and with the senders' own losses, each sender's (unweighted: a next-token loss over
    // the vocabulary, near its log at the start).
    if (method == "sender") {
      REQUIRE(row.contains("sender_loss"));
      CHECK(row["sender_loss"].size() == 2);
      for (const char* layer : {"1", "3"}) {
        const double loss = row["sender_loss"].value(layer, -1.0);
        CHECK(loss > 0.0);
        CHECK(loss < 3 * std::log(256.0));
      }
    } else {
      CHECK_FALSE(row.contains("sender_loss"));
    }
  }

  // The byte formula: per cut and direction, batch x seq x k float32 numbers a step, where the
  // unconstrained model sends d_model: k / d_model of its bytes (here 1/8). What else crosses
  // (the clipping norm's exchange) is the same in both, and step 1 also carries the probes.
  Json plainSpec = subspaceSpec(schedule, m, a, b, c, kind, method);
  plainSpec["model"].erase("subspace");
  const Json plain = runJob(context, a.control(), plainSpec);
  REQUIRE(plain["state"] == "succeeded");
  // The clipping norm's exchange carries one float per parameter tensor of the stages below
  // a link: the codes add theirs (gpt: stage 2's cut3.{decode, tokens, positions} up to
  // stage 1, those and stage 1's cut1.{decode, tokens, positions} and cut3.encode up to stage
  // 0, 10 floats; llama, without position tables, 7); the senders' losses add stage 1's
  // cut3.sender_{norm, head} up to stage 0 (gpt 3 tensors, llama 2: an RMSNorm has no bias).
  auto payload = [](int width) { return 2 /*cuts*/ * 2 /*directions*/ * double{kBatch} * kSeq * width * 4; };
  double norms = method == "shared" ? 0.0 : 4.0 * (kind == "gpt" ? 10 : 7);
  if (method == "sender") norms += 4.0 * (kind == "gpt" ? 3 : 2);
  for (int step = 1; step < kEquivalenceSteps; ++step) {
    const double rest = plain["steps"][step]["bytes_raw"].get<double>() - payload(kDModel);
    CHECK(rest >= 0);
    CHECK(rest < 0.05 * payload(kRank));
    CHECK(status["steps"][step]["bytes_raw"].get<double>() == payload(kRank) + rest + norms);
  }

  double worstLoss = 0;
  for (int step = 0; step < kEquivalenceSteps; ++step) {
    worstLoss = std::max(worstLoss, std::abs(status["steps"][step]["loss"].get<double>() - reference.losses[step]));
  }
  CHECK(worstLoss <= 1e-4);
  CHECK(reference.losses.back() < reference.losses.front());
  const std::string job = status["id"];
  auto weights = loadStageWeights(a.dir() / "jobs" / job / "stage-0.pt");
  weights.merge(loadStageWeights(b.dir() / "jobs" / job / "stage-1.pt"));
  weights.merge(loadStageWeights(c.dir() / "jobs" / job / "stage-2.pt"));
  double worstParameter = 0;
  for (const auto& [name, expected] : reference.parameters) {
    INFO(name);
    REQUIRE(weights.count(name));
    worstParameter = std::max(worstParameter, (weights.at(name) - expected).abs().max().item<double>());
  }
  CHECK(worstParameter <= 1e-4);
  // One micro-batch: the very same float operations as the one process, each stage rebuilding
  // the hidden state from the token ids it reads itself (and, with the senders' losses, adding
  // its own loss's gradient to the code's as the one process does).
  if (m == 1) {
    CHECK(worstLoss == 0.0);
    CHECK(worstParameter == 0.0);
  }
  // `skytrain export`: every parameter, and the frozen frame the three stages hold alike once
  // (a model without it could not be used); no Hugging Face layout has a place for it.
  if (m == 1 && schedule == "gpipe") {
    client::ClientOptions options;
    options.daemon = a.control();
    const std::string out = (a.dir() / "subspace.safetensors").string();
    REQUIRE(client::exportWeights(options, job, out, client::ExportOptions{}) == 0);
    std::ifstream in(out, std::ios::binary);
    const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::map<std::string, at::Tensor> exported;
    for (const auto& [name, tensor] : stages::decodeSafetensors(bytes, out).tensors) exported[name] = tensor;
    for (const auto& [name, expected] : reference.parameters) {
      INFO(name);
      REQUIRE(exported.count(name));
      CHECK(torch::equal(exported.at(name), weights.at(name)));
    }
    if (method == "sender") CHECK(exported.count("cut3.sender_head.weight"));
    if (method == "shared") {
      REQUIRE(exported.count("subspace.basis"));
      CHECK(exported.at("subspace.basis").sizes() == c10::IntArrayRef({kDModel, kRank}));
      CHECK(exported.count("subspace.tokens"));
    } else {
      REQUIRE(exported.count("cut1.encode.weight"));
      CHECK(exported.at("cut1.encode.weight").sizes() == c10::IntArrayRef({kRank, kDModel}));
      CHECK(exported.count("cut3.tokens"));
    }
    client::ExportOptions hf;
    hf.format = "hf";
    CHECK(client::exportWeights(options, job, (a.dir() / "subspace-hf").string(), hf) != 0);
  }
    WARN(kind << " " << method << " " << schedule << " m=" << m << ": max |loss diff| " << worstLoss << ", max |parameter diff| " << worstParameter);
}

TEST_CASE("a pretrained tied LLaMA fine-tunes as a tied subspace model on three daemons like one process",
          "[integration]") {
  TestDaemon a("ta"), b("tb"), c("tc");
  zmq::context_t context;
  // The pretrained model: an unconstrained, tied LLaMA of the same shape from another seed.
  stages::LlamaConfig plain;
  plain.vocabSize = 256, plain.dModel = kDModel, plain.heads = 4, plain.kvHeads = 2, plain.layers = 4, plain.dFf = 64;
  plain.seqLen = kSeq, plain.tieEmbeddings = true;
  stages::SafeTensors pretrained;
  for (const auto& [name, tensor] : stages::makeLlamaStage(plain, 0, 4, 99)->stateDict()) {
    pretrained.tensors.emplace_back(name, tensor.detach().clone());
  }
  const auto file = a.dir() / "pretrained.safetensors";
  std::ofstream(file, std::ios::binary) << stages::encodeSafetensors(pretrained);
  Json spec = subspaceSpec("gpipe", 1, a, b, c, "llama");
  spec["model"]["tie_embeddings"] = true;
  spec["model"]["init_from"] = file.string();
  const Trained reference = trainReference(spec);
  const Json status = runJob(context, a.control(), spec);
  INFO(status.dump());
  REQUIRE(status["state"] == "succeeded");
  for (const auto& stage : status["plans"].back()["stages"]) CHECK(stage["init_from"][0]["from_seed"] == 0);
  const std::string job = status["id"];
  const auto first = loadStageWeights(a.dir() / "jobs" / job / "stage-0.pt");
  const auto middle = loadStageWeights(b.dir() / "jobs" / job / "stage-1.pt");
  const auto last = loadStageWeights(c.dir() / "jobs" / job / "stage-2.pt");
  // The three stages converted the file alike, and the tied copy [vocab, k] kept up.
  CHECK(torch::equal(first.at("subspace.basis"), last.at("subspace.basis")));
  CHECK(torch::equal(middle.at("subspace.tokens"), last.at("subspace.tokens")));
  CHECK(last.at("head.weight").sizes() == c10::IntArrayRef({256, kRank}));
  CHECK(torch::equal(last.at("head.weight"), first.at("tok_emb.weight")));
  double worstLoss = 0, worstParameter = 0;
  for (int step = 0; step < kEquivalenceSteps; ++step) {
    worstLoss = std::max(worstLoss, std::abs(status["steps"][step]["loss"].get<double>() - reference.losses[step]));
  }
  for (const auto& [name, expected] : reference.parameters) {
    const auto& held = name == "tok_emb.weight" ? first : first.count(name) ? first : middle.count(name) ? middle : last;
    INFO(name);
    REQUIRE(held.count(name));
    worstParameter = std::max(worstParameter, (held.at(name) - expected).abs().max().item<double>());
  }
  // One process holds one tied matrix; the pipeline adds the copies' gradients: a float's order.
  CHECK(worstLoss <= 1e-5);
  CHECK(worstParameter <= 1e-5);
  WARN("tied subspace llama from a pretrained file: max |loss diff| " << worstLoss << ", max |parameter diff| " << worstParameter);

  // A crafted pretrained file (a NaN in block 2's MLP projection, which every stage reads to
  // find U): the job fails naming the tensor, no restart, and the daemons train on.
  stages::SafeTensors poisoned;
  for (const auto& [name, tensor] : pretrained.tensors) {
    at::Tensor copy = tensor.clone();
    if (name == "block2.mlp.down.weight") copy.index_put_({0, 0}, NAN);
    poisoned.tensors.emplace_back(name, copy);
  }
  const auto bad = a.dir() / "poisoned.safetensors";
  std::ofstream(bad, std::ios::binary) << stages::encodeSafetensors(poisoned);
  Json crafted = spec;
  crafted["model"]["init_from"] = bad.string();
  const Json refused = runJob(context, a.control(), crafted);
  REQUIRE(refused["state"] == "failed");
  CHECK(refused["restarts"] == 0);
  CHECK_THAT(refused["error"].get<std::string>(),
             Catch::Contains("bad model") && Catch::Contains("block2.mlp.down.weight: the file's holds a NaN"));
  // The same file into learned codes at the cuts: the code before block 3 is found from
  // blocks 0-2's projections, so stages 1 and 2 read the poisoned one.
  crafted["model"]["subspace"]["method"] = "cut";
  const Json refusedAtCuts = runJob(context, a.control(), crafted);
  REQUIRE(refusedAtCuts["state"] == "failed");
  CHECK(refusedAtCuts["restarts"] == 0);
  CHECK_THAT(refusedAtCuts["error"].get<std::string>(),
             Catch::Contains("bad model") && Catch::Contains("block2.mlp.down.weight: the file's holds a NaN"));
  CHECK(runJob(context, a.control(), spec)["state"] == "succeeded");
}
