#include "stages/models/torchscript/torchscript_source.h"

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "compression/wire/zip_directory.h"
#include "scheduler/error.h"
#include "stages/allocation_meter.h"
#include "stages/models/torchscript/torchscript_stage.h"

namespace skytrain::stages {
namespace {

std::string shapeText(at::IntArrayRef shape) { return c10::str(shape); }

// One TorchScript file per stage. The first stage takes token ids [b, seq_len]; stage i > 0
// takes float32 [b, input_shape...] as the spec declares, or as the previous stage's
// output turns out to be (sampleOutputShape); the last stage's output goes to the loss.
// Each file is checked when its stage is built, on two zero samples.
class TorchScriptSource : public ModelSource {
 public:
  explicit TorchScriptSource(ModelConfig config) : c_(std::move(config)) {}

  std::unique_ptr<Stage> build(int stage) const override {
    const bool last = stage + 1 == static_cast<int>(c_.stages.size());
    const bool moduleLoss = last && c_.loss == "module";
    auto built = loadTorchScriptStage(c_.stages.at(stage).module, moduleLoss);
    checkTied(*built, stage);
    const at::Tensor output = probe(*built, stage);
    const std::string what = probeText(stage);
    if (output.scalar_type() != at::kFloat) {
      throw Error(what + " returned " + std::string(c10::toString(output.scalar_type())) + ", expected float32");
    }
    if (!last) {
      const auto next = inputShape(stage + 1, kProbeSamples);
      if (!output.sizes().equals(next)) {
        throw Error(what + " returned " + shapeText(output.sizes()) + "; stage " + std::to_string(stage + 1) +
                    " takes " + shapeText(next) + " (its input_shape)");
      }
    } else if (!moduleLoss) {
      const std::vector<int64_t> logits{kProbeSamples, c_.gpt.seqLen, c_.gpt.vocabSize};
      if (!output.sizes().equals(logits)) {
        throw Error(what + " returned " + shapeText(output.sizes()) + "; the cross-entropy loss takes logits " +
                    shapeText(logits) + " ([samples, seq_len, vocab_size])");
      }
    } else {
      try {
        torch::NoGradGuard noGrad;
        const at::Tensor loss = built->loss(output, torch::zeros({kProbeSamples, c_.gpt.seqLen}, torch::kLong));
        if (loss.numel() != 1) throw Error("returned shape " + shapeText(loss.sizes()) + ", not a scalar");
      } catch (const std::exception& e) {
        throw Error(c_.stages.at(stage).module + " (stage " + std::to_string(stage) +
                    "): loss(output, targets) failed: " + firstLineOf(e));
      }
    }
    return built;
  }
  // From admission's stash measurement when it ran (the same source), else one forward.
  std::vector<int64_t> sampleOutputShape(int stage) const override {
    {
      std::lock_guard<std::mutex> lock(measuredMutex_);
      if (const auto it = outputs_.find(stage); it != outputs_.end()) return it->second;
    }
    const at::Tensor output = probe(*loadTorchScriptStage(c_.stages.at(stage).module, false), stage);
    std::lock_guard<std::mutex> lock(measuredMutex_);
    return outputs_[stage] = perSample(output, stage);
  }
  std::vector<int64_t> inputShape(int stage, int64_t samples) const override {
    if (stage == 0) return {samples, c_.gpt.seqLen};
    std::vector<int64_t> shape{samples};
    const auto& perSample = c_.stages.at(stage).inputShape;
    shape.insert(shape.end(), perSample.begin(), perSample.end());
    return shape;
  }
  double weightBytes(int stage) const override {
    // What loading the archive allocates: its members at their inflated sizes, from its ZIP
    // directory (a module's file size would count a zip bomb at 3 MB, not its 3 GiB).
    // Throws WireError for a file that is not a ZIP archive, before anything loads it.
    const std::string& file = c_.stages.at(stage).module;
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) return 0.0;  // build() names the missing file
    try {
      return static_cast<double>(compression::readZipDirectory(file).uncompressedBytes);
    } catch (const Error& e) {
      throw Error(file + " (stage " + std::to_string(stage) + "): not a loadable TorchScript module: " + e.what());
    }
  }
  // Measured, not modelled (a module is code): what a training forward of a few zero samples
  // leaves allocated for the backward, per sample (AllocationMeter). The first forward runs
  // unmeasured: TorchScript's executor optimises the graph on it. 0 when the module cannot
  // run here (build() says why). Once per stage; the output's shape is kept too.
  double stashBytesPerSample(int stage) const override {
    std::lock_guard<std::mutex> lock(measuredMutex_);
    if (const auto it = stash_.find(stage); it != stash_.end()) return it->second;
    double bytes = 0;
    try {
      auto built = loadTorchScriptStage(c_.stages.at(stage).module, false);
      const at::Tensor input = zeroInput(stage, kStashSamples);
      built->forward(1, input);
      AllocationMeter meter;
      const at::Tensor output = built->forward(0, input);
      bytes = static_cast<double>(meter.liveBytes()) / kStashSamples;
      if (output.dim() >= 2 && output.size(0) == kStashSamples) outputs_[stage] = output.sizes().slice(1).vec();
    } catch (const std::exception&) {
      bytes = 0;
    }
    stash_[stage] = bytes;
    return bytes;
  }
  std::vector<TiedPair> tied() const override {
    std::vector<TiedPair> out;
    const int last = static_cast<int>(c_.stages.size()) - 1;
    for (const auto& [first, second] : c_.tied) {
      if (last > 0) out.push_back({0, first, last, second});
    }
    return out;
  }

 private:
  static constexpr int64_t kProbeSamples = 2;
  static constexpr int64_t kStashSamples = 4;

  std::string probeText(int stage) const {
    return c_.stages.at(stage).module + " (stage " + std::to_string(stage) + "): forward on " +
           (stage == 0 ? "token ids " : "float32 ") + shapeText(inputShape(stage, kProbeSamples));
  }
  // `samples` zero samples of what the stage takes: token ids on the first, else float32.
  at::Tensor zeroInput(int stage, int64_t samples) const {
    const auto shape = inputShape(stage, samples);
    return stage == 0 ? torch::zeros(shape, torch::kLong) : torch::zeros(shape);
  }
  // The module's output on kProbeSamples zero samples of its input.
  at::Tensor probe(Stage& built, int stage) const {
    try {
      return built.infer(zeroInput(stage, kProbeSamples));
    } catch (const std::exception& e) {
      throw Error(probeText(stage) + " failed: " + firstLineOf(e));
    }
  }
  // One sample's shape of an output, which must have one row a sample.
  std::vector<int64_t> perSample(const at::Tensor& output, int stage) const {
    if (output.dim() < 2 || output.size(0) != kProbeSamples) {
      throw Error(probeText(stage) + " returned " + shapeText(output.sizes()) + ": not one row a sample");
    }
    return output.sizes().slice(1).vec();
  }

  // A tied name the stage should hold (model.tied) is in its module.
  void checkTied(const Stage& built, int stage) const {
    const int last = static_cast<int>(c_.stages.size()) - 1;
    for (const auto& [first, second] : c_.tied) {
      for (const auto& [holder, name] : {std::make_pair(0, first), std::make_pair(last, second)}) {
        if (holder != stage) continue;
        bool found = false;
        for (const auto& [each, tensor] : built.namedParameters()) found = found || each == name;
        if (!found) {
          throw Error(c_.stages.at(stage).module + " (stage " + std::to_string(stage) + "): model.tied names \"" + name +
                      "\", which is not a parameter of this module");
        }
      }
    }
  }

  ModelConfig c_;
  mutable std::mutex measuredMutex_;
  mutable std::map<int, double> stash_;                  // measured, per stage
  mutable std::map<int, std::vector<int64_t>> outputs_;  // one sample's output shape, per stage
};

}  // namespace

std::unique_ptr<ModelSource> makeTorchScriptSource(const ModelConfig& config) {
  return std::make_unique<TorchScriptSource>(config);
}

}  // namespace skytrain::stages
