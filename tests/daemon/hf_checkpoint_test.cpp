// Hugging Face checkpoints in and out, against an independent reference
// (tests/stages/hf_reference.py, written from transformers' published semantics): its random
// checkpoints load into the zoo's llama, gpt2 and bert-layout encoder stages cut in 1, 2 and 3, whose logits match
// its forward; each stage reads only its own tensors; export -> import is bit-identical.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "client/export/hf_export.h"
#include "client/export/safetensors_merge.h"
#include "daemon/protocol/spec/hf_layout.h"
#include "daemon/protocol/spec/job_spec.h"
#include "daemon/stage/state/initial_weights.h"
#include "daemon/stage/state/model_setup.h"
#include "scheduler/error.h"
#include "stages/weights/hf_checkpoint.h"
#include "stages/models/model_source.h"
#include "stages/weights/safetensors.h"

using namespace skytrain;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kDir = SKYTRAIN_HF_DIR;

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A spec of the reference checkpoints' sizes, cut at `cuts`, starting from `dir`.
protocol::JobSpec specFor(const std::string& kind, const std::string& dir, const std::vector<int>& cuts, bool tied,
                          int layers = 3) {
  // "bert": the encoder in BERT's layout (its MLM decoder is always the word embeddings).
  json model = {{"kind", kind == "bert" ? "encoder" : kind}, {"vocab_size", 96}, {"d_model", 32}, {"heads", 4},
                {"layers", layers}, {"d_ff", 48}, {"seq_len", 16}, {"init_from", dir}};
  if (kind == "bert") {
    model["layout"] = "bert";
  } else {
    model["tie_embeddings"] = tied;
  }
  if (kind == "llama") {
    model["kv_heads"] = tied ? 4 : 2;
    model["norm_eps"] = 1e-5;
  }
  model["positions"] = 64;
  json stages = json::array();
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    stages.push_back({{"daemon", "tcp://127.0.0.1:" + std::to_string(9000 + i)}, {"layers", {cuts[i], cuts[i + 1]}}});
  }
  const json spec = {{"model", model}, {"data", {{"files", {"unused.txt"}}}}, {"stages", stages}};
  return protocol::parseJobSpec(spec.dump());
}

struct Loaded {
  std::vector<std::unique_ptr<stages::Stage>> stages;
  std::vector<json> reports;
};

Loaded load(const protocol::JobSpec& spec) {
  Loaded out;
  const auto source = stages::makeModelSource(daemon::modelConfig(spec));
  for (size_t i = 0; i < spec.stages.size(); ++i) {
    out.stages.push_back(source->build(static_cast<int>(i)));
    const json report = daemon::loadInitialWeights(*out.stages.back(), spec, static_cast<int>(i), "");
    REQUIRE(report.size() == 1);
    out.reports.push_back(report[0]);
  }
  return out;
}

at::Tensor logitsOf(Loaded& loaded, const at::Tensor& tokens) {
  at::Tensor x = tokens;
  for (auto& stage : loaded.stages) x = stage->infer(x);
  return x;
}

std::map<std::string, at::Tensor> referenceOf(const std::string& name) {
  const std::string path = kDir + "/" + name + ".logits.safetensors";
  std::map<std::string, at::Tensor> out;
  for (auto& [key, tensor] : stages::decodeSafetensors(readAll(path), path).tensors) out[key] = tensor;
  return out;
}

}  // namespace

TEST_CASE("Hugging Face llama and gpt2 checkpoints load into stages cut anywhere, matching the reference forward") {
  const auto [kind, name, tied] = GENERATE(std::make_tuple("llama", "llama", false),
                                           std::make_tuple("llama", "llama-tied-bf16", true),
                                           std::make_tuple("gpt2", "gpt2", true),
                                           std::make_tuple("gpt2", "gpt2-bare", true),
                                           std::make_tuple("bert", "bert", true),
                                           std::make_tuple("bert", "bert-pooler-bf16", true));
  const std::vector<int> cuts = GENERATE(std::vector<int>{0, 3}, std::vector<int>{0, 2, 3}, std::vector<int>{0, 1, 2, 3});
  CAPTURE(name, cuts);
  auto reference = referenceOf(name);
  Loaded loaded = load(specFor(kind, kDir + "/" + name, cuts, tied));
  const at::Tensor logits = logitsOf(loaded, reference.at("tokens"));
  const double worst = (logits - reference.at("logits")).abs().max().item<double>();
  WARN(name << " cut " << cuts.size() - 1 << ": max |logit - reference| " << worst);
  CHECK(worst <= 1e-5);
  for (const auto& report : loaded.reports) {
    CHECK(report["format"] == "hf");
    CHECK(report["from_seed"] == 0);  // every parameter came from the checkpoint
  }
}

TEST_CASE("a Hugging Face checkpoint converts into the subspace form: at k = d_model the reference's logits") {
  // gpt2's checkpoint is tied: untied, the subspace model's head starts as its embedding;
  // tied, the tied matrix is the frozen table plus U times the k-wide embedding.
  const auto [kind, name, tied] = GENERATE(std::make_tuple("llama", "llama", false), std::make_tuple("gpt2", "gpt2", false),
                                           std::make_tuple("gpt2", "gpt2", true),
                                           std::make_tuple("llama", "llama-tied-bf16", true));
  const std::vector<int> cuts = GENERATE(std::vector<int>{0, 3}, std::vector<int>{0, 1, 2, 3});
  CAPTURE(name, tied, cuts);
  auto reference = referenceOf(name);
  protocol::JobSpec job = specFor(kind, kDir + "/" + name, cuts, tied);
  job.model.subspace.rank = 32;  // = d_model: U spans the stream, the model is the pretrained one
  Loaded loaded = load(job);
  for (auto& stage : loaded.stages) stage->setTokens(reference.at("tokens"));  // each rebuilds F from them
  const double worst = (logitsOf(loaded, reference.at("tokens")) - reference.at("logits")).abs().max().item<double>();
  WARN(name << (tied ? " tied" : "") << " as a subspace model, cut " << cuts.size() - 1 << ": max |logit - reference| " << worst);
  CHECK(worst <= 2e-6);
  for (const auto& report : loaded.reports) CHECK(report["from_seed"] == 0);
  // k < d_model: every stage finds the same frame.
  job.model.subspace.rank = 8;
  Loaded narrow = load(job);
  const auto frameOf = [](const stages::Stage& stage, const std::string& name) {
    for (const auto& [n, t] : stage.stateDict()) {
      if (n == name) return t;
    }
    return at::Tensor();
  };
  for (const auto& stage : narrow.stages) {
    for (const char* name : {"subspace.basis", "subspace.tokens"}) {
      CHECK(torch::equal(frameOf(*stage, name), frameOf(*narrow.stages[0], name)));
    }
  }
}

TEST_CASE("each stage reads only its own tensors of a sharded checkpoint") {
  Loaded loaded = load(specFor("llama", kDir + "/llama", {0, 1, 2, 3}, false));
  stages::HfCheckpoint whole(kDir + "/llama");
  CHECK(whole.files() == 3);
  uint64_t sum = 0;
  for (const auto& report : loaded.reports) {
    const uint64_t read = report["bytes_read"];
    CHECK(report["bytes_total"] == whole.totalBytes());
    CHECK(read < whole.totalBytes() / 2);  // a third of the layers plus one end
    sum += read;
  }
  CHECK(sum == whole.totalBytes());  // together they read the checkpoint exactly once
  // The two ends read the embedding and the head; the middle stage one layer's tensors.
  const uint64_t layer = (2 * 32 + 2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 48) * 4;
  CHECK(loaded.reports[1]["bytes_read"] == layer);
}

TEST_CASE("a checkpoint that does not describe the spec's model is refused naming each field and both values") {
  const auto spec = specFor("llama", kDir + "/llama", {0, 4}, false, 4);
  const auto source = stages::makeModelSource(daemon::modelConfig(spec));
  auto stage = source->build(0);
  CHECK_THROWS_WITH(daemon::loadInitialWeights(*stage, spec, 0, ""),
                    Catch::Contains("num_hidden_layers: config.json has 3, the spec 4"));
  const auto gpt2 = specFor("gpt2", kDir + "/llama", {0, 3}, true);
  auto other = stages::makeModelSource(daemon::modelConfig(gpt2))->build(0);
  CHECK_THROWS_WITH(daemon::loadInitialWeights(*other, gpt2, 0, ""),
                    Catch::Contains("model_type: config.json has \"llama\", the spec \"gpt2\""));
}

TEST_CASE("export in Hugging Face layout, then import: bit-identical, and the reference reads it as the same model") {
  const auto [kind, name, tied] =
      GENERATE(std::make_tuple("llama", "llama", false), std::make_tuple("gpt2", "gpt2", true),
               std::make_tuple("bert", "bert", true));
  CAPTURE(name);
  const auto spec = specFor(kind, kDir + "/" + name, {0, 1, 3}, tied);
  Loaded loaded = load(spec);
  stages::SafeTensors merged;
  for (auto& stage : loaded.stages) {
    for (auto& [key, tensor] : stage->namedParameters()) merged.tensors.emplace_back(key, tensor.detach());
  }
  const fs::path work = fs::temp_directory_path() / ("skytrain-hf-" + std::string(name) + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work);
  {
    std::ofstream out(work / "merged.safetensors", std::ios::binary);
    out << stages::encodeSafetensors(merged);
  }
  const auto written =
      client::writeHfDirectory(spec.model, (work / "merged.safetensors").string(), (work / "hf").string(), 20'000);
  CHECK(written.shards > 2);  // 20 kB shards: the index and several files
  CHECK(fs::exists(work / "hf" / "model.safetensors.index.json"));
  // The independent reader: same config fields and tensors, bit for bit, loadable layout.
  const std::string compare = std::string(SKYTRAIN_TORCH_PYTHON) + " " + SKYTRAIN_HF_REFERENCE + " compare --a " +
                              kDir + "/" + name + " --b " + (work / "hf").string();
  CHECK(std::system(compare.c_str()) == 0);
  // And back in: the same weights, bit for bit.
  Loaded again = load(specFor(kind, (work / "hf").string(), {0, 2, 3}, tied));
  std::map<std::string, at::Tensor> before;
  for (auto& [key, tensor] : merged.tensors) before[key] = tensor;
  for (auto& stage : again.stages) {
    for (auto& [key, tensor] : stage->namedParameters()) {
      INFO(key);
      CHECK(torch::equal(tensor, before.at(key)));
    }
  }
  CHECK_THROWS_WITH(client::writeHfDirectory(spec.model, (work / "merged.safetensors").string(), (work / "hf").string(),
                                             20'000),
                    Catch::Contains("not an empty directory"));
  fs::remove_all(work);
}

TEST_CASE("the tied pairs export writes once are the model source's own, for every kind that ties") {
  auto pairsOf = [](const json& model, size_t stages) {
    json spec = {{"model", model}, {"data", {{"files", {"unused.txt"}}}}, {"stages", json::array()}};
    for (size_t i = 0; i < stages; ++i) {
      json stage = {{"daemon", "tcp://127.0.0.1:" + std::to_string(9000 + i)}};
      if (model["kind"] == "torchscript") {
        stage["module"] = "/m/" + std::to_string(i) + ".pt";
      } else {
        stage["layers"] = {static_cast<int>(i * 4 / stages), static_cast<int>((i + 1) * 4 / stages)};
      }
      spec["stages"].push_back(stage);
    }
    const auto parsed = protocol::parseJobSpec(spec.dump());
    std::vector<std::pair<std::string, std::string>> fromSource;
    for (const auto& t : stages::makeModelSource(daemon::modelConfig(parsed))->tied()) {
      fromSource.emplace_back(t.firstName, t.secondName);
    }
    CHECK(protocol::tiedCopies(parsed.model, stages) == fromSource);
    return fromSource.size();
  };
  const json base = {{"vocab_size", 96}, {"d_model", 32}, {"heads", 4}, {"layers", 4}, {"d_ff", 48}, {"seq_len", 16}};
  auto with = [&](json extra) {
    json m = base;
    m.update(extra);
    return m;
  };
  CHECK(pairsOf(with({{"kind", "llama"}, {"tie_embeddings", true}}), 2) == 1);
  CHECK(pairsOf(with({{"kind", "llama"}, {"tie_embeddings", true}}), 1) == 0);  // one stage: one matrix
  CHECK(pairsOf(with({{"kind", "llama"}}), 2) == 0);
  CHECK(pairsOf(with({{"kind", "gpt2"}}), 2) == 1);  // tied by default
  CHECK(pairsOf(with({{"kind", "gpt2"}, {"tie_embeddings", false}}), 2) == 0);
  CHECK(pairsOf(with({{"kind", "gpt"}}), 2) == 0);
  CHECK(pairsOf(with({{"kind", "encoder"}, {"layout", "bert"}}), 2) == 1);
  CHECK(pairsOf(with({{"kind", "encoder"}}), 2) == 0);
  const json script = {{"kind", "torchscript"}, {"vocab_size", 256}, {"seq_len", 16},
                      {"tied", json::array({json::array({"embed.weight", "head.weight"})})}};
  CHECK(pairsOf(script, 3) == 1);
  CHECK(pairsOf(script, 1) == 0);
}

TEST_CASE("a skytrain export holds a tied matrix once, and init_from starts both copies from it") {
  // A tied gpt2 cut in two: each stage's parameters as the daemons write them for export.
  const auto spec = specFor("gpt2", kDir + "/gpt2", {0, 1, 3}, true);
  Loaded loaded = load(spec);
  const fs::path work = fs::temp_directory_path() / ("skytrain-tied-" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work);
  std::vector<std::string> parts;
  std::map<std::string, at::Tensor> before;
  for (size_t i = 0; i < loaded.stages.size(); ++i) {
    stages::SafeTensors part;
    for (auto& [key, tensor] : loaded.stages[i]->namedParameters()) {
      part.tensors.emplace_back(key, tensor.detach());
      before[key] = tensor.detach();
    }
    parts.push_back((work / ("stage-" + std::to_string(i) + ".safetensors")).string());
    std::ofstream(parts.back(), std::ios::binary) << stages::encodeSafetensors(part);
  }
  REQUIRE(before.count("head.weight"));
  REQUIRE(torch::equal(before.at("head.weight"), before.at("tok_emb.weight")));
  const std::string merged = (work / "model.safetensors").string();
  client::mergeSafetensors(parts, merged, {{"format", "pt"}}, protocol::tiedCopies(spec.model, spec.stages.size()));
  const auto file = stages::decodeSafetensors(readAll(merged), merged);
  size_t heads = 0;
  for (const auto& [key, tensor] : file.tensors) heads += key == "head.weight";
  CHECK(heads == 0);  // once, as the embedding
  CHECK(file.metadata.at("skytrain_tied") == "head.weight=tok_emb.weight");
  CHECK(file.tensors.size() + 1 == before.size());

  // Back in, cut elsewhere: the last stage's copy is the file's embedding, not a seed's.
  Loaded again = load(specFor("gpt2", merged, {0, 2, 3}, true));
  for (auto& stage : again.stages) {
    for (auto& [key, tensor] : stage->namedParameters()) {
      INFO(key);
      CHECK(torch::equal(tensor, before.at(key)));
    }
  }
  CHECK(again.reports.back()["from_seed"] == 0);
  fs::remove_all(work);
}

TEST_CASE("a crafted Hugging Face directory cannot lead the reader outside it") {
  const fs::path work = fs::temp_directory_path() / ("skytrain-hf-hostile" + std::to_string(::getpid()));
  fs::remove_all(work);
  fs::create_directories(work);
  fs::copy_file(kDir + "/llama/config.json", work / "config.json");
  auto index = [&](const json& map) {
    std::ofstream(work / "model.safetensors.index.json") << json({{"metadata", {}}, {"weight_map", map}}).dump();
  };
  index({{"model.norm.weight", "../../etc/passwd"}});
  CHECK_THROWS_WITH(stages::HfCheckpoint(work.string()), Catch::Contains("is not a file name in the directory"));
  fs::create_symlink("/etc/passwd", work / "model-00001-of-00001.safetensors");
  index({{"model.norm.weight", "model-00001-of-00001.safetensors"}});
  CHECK_THROWS_WITH(stages::HfCheckpoint(work.string()), Catch::Contains("leads outside the directory"));
  fs::remove(work / "model-00001-of-00001.safetensors");
  fs::copy_file(kDir + "/llama/model-00001-of-00003.safetensors", work / "model-00001-of-00001.safetensors");
  index({{"model.norm.weight", "model-00001-of-00001.safetensors"}});  // in shard 3, not 1
  CHECK_THROWS_WITH(stages::HfCheckpoint(work.string()), Catch::Contains("is not in model-00001-of-00001"));
  index(json::array());
  CHECK_THROWS_WITH(stages::HfCheckpoint(work.string()), Catch::Contains("has no weight_map object"));
  fs::remove_all(work);
}
