// Cross-cloud fine-tuning over real daemons (issue: fine-tuning pretrained models): two
// trunks pretrained by skytrain jobs (a masked-LM encoder, a causal LM), their final
// checkpoints loaded into a translation model's stages on two daemons (per-stage
// init_from), the trunks frozen, adapters and cross-attention trained through compressed
// links; the job reports test BLEU, the frozen weights end exactly as pretrained, and the
// adapters have moved.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "daemon_fixture.h"
#include "stages/weights/safetensors.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;

namespace {

constexpr int kSeqLen = 16;
constexpr int kVocab = 259;  // bytes + [PAD] [BOS] [EOS]
const Json kSizes = {{"vocab_size", kVocab}, {"d_model", 32}, {"heads", 4}, {"layers", 2}, {"d_ff", 64}, {"seq_len", kSeqLen}};

Json pretrainSpec(const std::string& daemon, const std::string& kind, int steps) {
  Json model = kSizes;
  model["kind"] = kind;
  return {{"name", "pretrain-" + kind}, {"seed", 5}, {"steps", steps}, {"batch_size", 8}, {"micro_batches", 1},
          {"model", model}, {"data", {{"files", {SKYTRAIN_TEST_CORPUS}}}}, {"optimizer", {{"lr", 3e-3}}},
          {"eval", {{"samples", 8}}}, {"stages", {{{"daemon", daemon}, {"layers", {0, 2}}}}}};
}

// The final checkpoint of the job's only stage.
std::string finalCheckpoint(const TestDaemon& d, const Json& status, int steps) {
  char step[16];
  std::snprintf(step, sizeof step, "step-%08d", steps);  // named by the step's number
  return (d.dir() / "jobs" / status["id"].get<std::string>() / "checkpoints" / step / "stage-0.safetensors").string();
}

std::map<std::string, at::Tensor> parametersIn(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  std::map<std::string, at::Tensor> out;
  for (auto& [name, tensor] : stages::decodeSafetensors(bytes.str(), file).tensors) {
    if (name.rfind("param/", 0) == 0) out[name.substr(6)] = tensor;
  }
  return out;
}

// Pairs of the corpus's phrases: a phrase and its words in reverse order.
void writePairs(const std::string& path, size_t first, size_t count) {
  std::ifstream in(SKYTRAIN_TEST_CORPUS);
  std::string word;
  std::vector<std::string> words;
  while (in >> word && words.size() < 4 * (first + count)) words.push_back(word.substr(0, 6));
  std::ofstream out(path);
  for (size_t i = first; i < first + count; ++i) {
    const auto& a = words[4 * i];
    const auto& b = words[4 * i + 1];
    out << a << " " << b << "\t" << b << " " << a << "\n";
  }
}

}  // namespace

TEST_CASE("pretrained trunks fine-tuned across two daemons: only adapters and cross-attention change",
          "[integration][fine-tune]") {
  TestDaemon a("encoder"), b("decoder");
  zmq::context_t context;
  constexpr int kPretrainSteps = 3, kSteps = 6;
  const Json encoderRun = runJob(context, a.control(), pretrainSpec(a.control(), "encoder", kPretrainSteps));
  const Json decoderRun = runJob(context, b.control(), pretrainSpec(b.control(), "gpt", kPretrainSteps));
  REQUIRE(encoderRun["state"] == "succeeded");
  REQUIRE(decoderRun["state"] == "succeeded");
  const std::string encoderFile = finalCheckpoint(a, encoderRun, kPretrainSteps);
  const std::string decoderFile = finalCheckpoint(b, decoderRun, kPretrainSteps);

  const std::string train = (a.dir() / "train.tsv").string(), test = (a.dir() / "test.tsv").string();
  writePairs(train, 0, 200);
  writePairs(test, 200, 12);
  Json model = kSizes;
  model["kind"] = "translation";
  model["adapter"] = 8;
  model["trainable"] = {"*adapter*", "decoder.*.cross.*", "decoder.*.ln_cross.*"};
  const Json spec = {{"name", "translate"}, {"seed", 2}, {"steps", kSteps}, {"batch_size", 8}, {"micro_batches", 2},
                     {"schedule", "1f1b"}, {"model", model}, {"data", {{"files", {train}}, {"eval_files", {test}}}},
                     {"optimizer", {{"lr", 1e-2}, {"clip_norm", 1.0}}},
                     {"compression", {{"forward", "fp16+svd:0.5"}, {"backward", "int8"}}},
                     {"eval", {{"samples", 12}}},
                     {"stages", {{{"daemon", a.control()}, {"init_from", encoderFile}},
                                 {{"daemon", b.control()}, {"init_from", {decoderFile}}}}}};
  const Json status = runJob(context, a.control(), spec);
  INFO(status.dump().substr(0, 4000));
  REQUIRE(status["state"] == "succeeded");
  const double bleu = status["summary"]["validation_bleu"];
  CHECK(bleu >= 0.0);
  CHECK(bleu <= 100.0);
  // Each stage loaded its own trunk: every frozen parameter, the rest from the seed.
  const Json& stages = status["plans"].back()["stages"];
  for (int s = 0; s < 2; ++s) {
    CHECK(stages[s]["init_from"][0]["loaded"].get<int>() > 0);
    CHECK(stages[s]["parameters"]["frozen"].get<int64_t>() > stages[s]["parameters"]["trainable"].get<int64_t>());
  }

  const std::string id = status["id"];
  const std::pair<const TestDaemon*, std::string> ends[] = {{&a, encoderFile}, {&b, decoderFile}};
  for (int s = 0; s < 2; ++s) {
    const auto pretrained = parametersIn(ends[s].second);
    const auto trained = loadStageWeights(ends[s].first->dir() / "jobs" / id / ("stage-" + std::to_string(s) + ".pt"));
    const std::string prefix = s == 0 ? "encoder." : "decoder.";
    int moved = 0, kept = 0;
    for (const auto& [name, tensor] : trained) {
      CAPTURE(name);
      REQUIRE(name.rfind(prefix, 0) == 0);
      const auto it = pretrained.find(name.substr(prefix.size()));
      const bool trainable = name.find("adapter") != std::string::npos || name.find(".cross.") != std::string::npos ||
                             name.find(".ln_cross.") != std::string::npos;
      if (trainable) {
        CHECK(it == pretrained.end());  // new: not in the pretrained file
        if (name.find(".up.weight") != std::string::npos) moved += torch::count_nonzero(tensor).item<int64_t>() > 0;
      } else {
        REQUIRE(it != pretrained.end());
        CHECK(torch::equal(tensor, it->second));  // frozen: bit for bit as pretrained
        ++kept;
      }
    }
    CHECK(kept > 0);
    CHECK(moved > 0);  // adapters start at zero and trained
  }
}
