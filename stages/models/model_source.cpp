#include "stages/models/model_source.h"

#include <torch/torch.h>

#include <map>

#include "scheduler/error.h"
#include "stages/models/electra.h"
#include "stages/data/labelled_data.h"
#include "stages/data/parallel_data.h"
#include "stages/data/token_data.h"
#include "stages/models/torchscript/torchscript_source.h"
#include "stages/models/translation.h"

namespace skytrain::stages {
namespace {

// The fields every data source's options share, from the job's data config (the files
// aside: a pre-tokenised corpus takes them as sources).
template <typename Options>
Options sharedDataOptions(const DataConfig& config) {
  Options options;
  options.evalFiles = config.evalFiles;
  options.sentencepieceModel = config.sentencepieceModel;
  options.validationFraction = config.validationFraction;
  options.seqLen = config.seqLen;
  options.seed = config.seed;
  return options;
}

template <typename Options>
Options dataOptions(const DataConfig& config) {
  auto options = sharedDataOptions<Options>(config);
  options.files = config.files;
  return options;
}

// Tied embeddings cut across stages: the first stage's embedding and the last's head.
std::vector<TiedPair> tiedEnds(bool tied, size_t stages) {
  if (!tied || stages < 2) return {};
  return {{0, "tok_emb.weight", static_cast<int>(stages) - 1, "head.weight"}};
}

// The data a zoo stage reads: labelled lines for a classifier, else plain text.
std::unique_ptr<DataSource> zooData(const ModelSource& source, const std::string& kind, const DataConfig& config,
                                    int stage) {
  if (kind != "classifier") return source.ModelSource::makeData(config, stage);
  auto options = dataOptions<LabelledDataOptions>(config);
  options.classes = config.classes;
  return std::make_unique<LabelledDataSource>(options);
}

// The objective of a zoo kind: classification, masked-LM for the encoder (on a stage that
// reads data), else next-token prediction.
std::unique_ptr<Objective> zooObjective(const ModelConfig& c, const DataSource* data) {
  if (c.kind == "classifier") return makeClassificationObjective();
  if (c.kind == "encoder" && data) return makeMaskedLanguageModelObjective(data->tokenizer().vocabSize(), c.seed, c.maskRate);
  return makeLanguageModelObjective();
}

at::Tensor classificationLoss(const at::Tensor& logits, const at::Tensor& labels) {
  return torch::nn::functional::cross_entropy(logits.mean(1), labels);
}

// The zoo's decoder: blocks cut by layer range, weights from (seed, global name).
class GptSource : public ModelSource {
 public:
  // The encoder: the same blocks without the causal mask, an MLM head over the vocabulary.
  // The classifier: the encoder with a head over the labels, its logits averaged over the
  // sequence (a linear head on mean-pooled features), trained with cross-entropy.
  explicit GptSource(ModelConfig config) : c_(std::move(config)) {
    c_.gpt.causal = c_.kind == "gpt" || c_.kind == "gpt2";
    c_.gpt.geluTanh = c_.kind == "gpt2";
    if (c_.kind != "gpt2") c_.gpt.positions = 0, c_.gpt.tieEmbeddings = false;
    if (c_.kind == "classifier") {
      c_.gpt.outputs = c_.classes;
      c_.gpt.headName = "classifier";
    }
  }

  std::unique_ptr<Stage> build(int stage) const override {
    const auto& s = c_.stages.at(stage);
    if (c_.kind == "classifier") return makeGptStage(c_.gpt, s.firstLayer, s.lastLayer, c_.seed, classificationLoss);
    return makeGptStage(c_.gpt, s.firstLayer, s.lastLayer, c_.seed);
  }
  std::vector<int64_t> inputShape(int stage, int64_t samples) const override {
    return gptInputShape(c_.gpt, c_.stages.at(stage).firstLayer, samples);
  }
  double weightBytes(int stage) const override {
    const auto& s = c_.stages.at(stage);
    return 4.0 * static_cast<double>(gptParameterCount(c_.gpt, s.firstLayer, s.lastLayer));
  }
  double frozenBytes(int) const override {
    const GptConfig& g = c_.gpt;
    if (g.subspaceRank <= 0) return 0;
    return 4.0 * double(subspaceFrameCount(g.vocabSize, g.dModel, g.subspaceRank, g.positions > 0 ? g.positions : g.seqLen));
  }
  double stashBytesPerSample(int stage) const override {
    const auto& s = c_.stages.at(stage);
    return gptStashBytesPerSample(c_.gpt, s.firstLayer, s.lastLayer);
  }
  std::unique_ptr<DataSource> makeData(const DataConfig& config, int stage) const override {
    return zooData(*this, c_.kind, config, stage);
  }
  std::unique_ptr<Objective> objective(const DataSource* data) const override { return zooObjective(c_, data); }
  std::vector<TiedPair> tied() const override { return tiedEnds(c_.gpt.tieEmbeddings, c_.stages.size()); }

 private:
  ModelConfig c_;
};

// The LLaMA family, cut by layer range like gpt.
class LlamaSource : public ModelSource {
 public:
  explicit LlamaSource(ModelConfig config) : c_(std::move(config)) {}

  std::unique_ptr<Stage> build(int stage) const override {
    const auto& s = c_.stages.at(stage);
    return makeLlamaStage(c_.llama, s.firstLayer, s.lastLayer, c_.seed);
  }
  std::vector<int64_t> inputShape(int stage, int64_t samples) const override {
    return llamaInputShape(c_.llama, c_.stages.at(stage).firstLayer, samples);
  }
  double weightBytes(int stage) const override {
    const auto& s = c_.stages.at(stage);
    return 4.0 * static_cast<double>(llamaParameterCount(c_.llama, s.firstLayer, s.lastLayer));
  }
  double frozenBytes(int) const override {
    const LlamaConfig& l = c_.llama;
    if (l.subspaceRank <= 0) return 0;
    return 4.0 * double(subspaceFrameCount(l.vocabSize, l.dModel, l.subspaceRank, 0));
  }
  double stashBytesPerSample(int stage) const override {
    const auto& s = c_.stages.at(stage);
    return llamaStashBytesPerSample(c_.llama, s.firstLayer, s.lastLayer);
  }
  std::vector<TiedPair> tied() const override { return tiedEnds(c_.llama.tieEmbeddings, c_.stages.size()); }

 private:
  ModelConfig c_;
};

// The encoder and classifier in BERT's layout (stages/models/bert.h).
class BertSource : public ModelSource {
 public:
  explicit BertSource(ModelConfig config) : c_(std::move(config)) {
    c_.bert.outputs = c_.kind == "classifier" ? c_.classes : 0;
  }

  std::unique_ptr<Stage> build(int stage) const override {
    const auto& s = c_.stages.at(stage);
    return makeBertStage(c_.bert, s.firstLayer, s.lastLayer, c_.seed,
                         c_.kind == "classifier" ? classificationLoss : decltype(&classificationLoss){});
  }
  std::vector<int64_t> inputShape(int stage, int64_t samples) const override {
    return bertInputShape(c_.bert, c_.stages.at(stage).firstLayer, samples);
  }
  double weightBytes(int stage) const override {
    const auto& s = c_.stages.at(stage);
    return 4.0 * static_cast<double>(bertParameterCount(c_.bert, s.firstLayer, s.lastLayer));
  }
  double stashBytesPerSample(int stage) const override {
    const auto& s = c_.stages.at(stage);
    return bertStashBytesPerSample(c_.bert, s.firstLayer, s.lastLayer);
  }
  std::unique_ptr<DataSource> makeData(const DataConfig& config, int stage) const override {
    return zooData(*this, c_.kind, config, stage);
  }
  std::unique_ptr<Objective> objective(const DataSource* data) const override { return zooObjective(c_, data); }
  // The MLM decoder is the word embeddings.
  std::vector<TiedPair> tied() const override { return tiedEnds(c_.kind != "classifier", c_.stages.size()); }

 private:
  ModelConfig c_;
};

// ELECTRA: stages 0..n-2 are generators (bidirectional encoders with an MLM head, each
// initialised from its own seed), stage n-1 the discriminator (an encoder with one logit a
// token). The discriminator takes what the tokens codec carries: int64 [b, T, 2].
class ElectraSource : public ModelSource {
 public:
  explicit ElectraSource(ModelConfig config) : c_(std::move(config)) {
    c_.gpt.causal = false;
    c_.gpt.outputs = 1;
    c_.generator.causal = false;
    c_.generator.outputs = 0;
    c_.generator.vocabSize = c_.gpt.vocabSize;
    c_.generator.seqLen = c_.gpt.seqLen;
  }

  std::unique_ptr<Stage> build(int stage) const override {
    if (isDiscriminator(stage)) return makeGptStage(c_.gpt, 0, c_.gpt.layers, c_.seed, replacedTokenLoss);
    return makeGptStage(c_.generator, 0, c_.generator.layers, c_.seed + 0x9e3779b97f4a7c15ULL * (stage + 1));
  }
  std::vector<int64_t> inputShape(int stage, int64_t samples) const override {
    if (isDiscriminator(stage)) return {samples, c_.gpt.seqLen, 2};
    return {samples, c_.gpt.seqLen};
  }
  double weightBytes(int stage) const override {
    const GptConfig& g = configOf(stage);
    return 4.0 * static_cast<double>(gptParameterCount(g, 0, g.layers));
  }
  double stashBytesPerSample(int stage) const override {
    const GptConfig& g = configOf(stage);
    return gptStashBytesPerSample(g, 0, g.layers);
  }
  bool fanIn() const override { return true; }
  std::unique_ptr<Objective> objective(const DataSource* data) const override {
    return makeElectraObjective(data ? data->tokenizer().vocabSize() : 0, c_.seed, c_.maskRate);
  }

 private:
  bool isDiscriminator(int stage) const { return stage + 1 == static_cast<int>(c_.stages.size()); }
  const GptConfig& configOf(int stage) const { return isDiscriminator(stage) ? c_.gpt : c_.generator; }

  ModelConfig c_;
};

// Translation: stage 0 the encoder, stage 1 the decoder with cross-attention, each with the
// adapters model.adapter asks for. The memory [b, S, d] crosses between them.
class TranslationSource : public ModelSource {
 public:
  explicit TranslationSource(ModelConfig config) : c_(std::move(config)) {
    if (c_.stages.size() != 2) {
      throw Error("a translation model has two stages (the encoder, the decoder), not " + std::to_string(c_.stages.size()));
    }
    decoder_ = c_.gpt;
    if (c_.decoderLayers > 0) decoder_.layers = c_.decoderLayers;
    decoder_.crossAttention = true;
    c_.gpt.causal = false;
    c_.gpt.head = false;
  }

  std::unique_ptr<Stage> build(int stage) const override {
    return stage == 0 ? makeTranslationEncoder(c_.gpt, c_.seed) : makeTranslationDecoder(decoder_, c_.seed);
  }
  std::vector<int64_t> inputShape(int stage, int64_t samples) const override {
    if (stage == 0) return {samples, c_.gpt.seqLen};
    return {samples, c_.gpt.seqLen, c_.gpt.dModel};
  }
  double weightBytes(int stage) const override {
    const GptConfig& g = stage == 0 ? c_.gpt : decoder_;
    return 4.0 * static_cast<double>(gptParameterCount(g, 0, g.layers));
  }
  double stashBytesPerSample(int stage) const override {
    const GptConfig& g = stage == 0 ? c_.gpt : decoder_;
    // Cross-attention keeps about as much as self-attention again.
    return gptStashBytesPerSample(g, 0, g.layers) * (stage == 0 ? 1.0 : 1.5);
  }
  std::string namePrefix(int stage) const override { return stage == 0 ? kEncoderPrefix : kDecoderPrefix; }
  std::unique_ptr<DataSource> makeData(const DataConfig& config, int) const override {
    auto options = dataOptions<ParallelDataOptions>(config);
    options.vocabSize = config.vocabSize;
    return std::make_unique<ParallelDataSource>(options);
  }
  std::unique_ptr<Objective> objective(const DataSource* data) const override {
    if (!data) return makeLanguageModelObjective();
    return makeTranslationObjective(dynamic_cast<const ParallelDataSource&>(*data), c_.gpt.vocabSize, c_.gpt.seqLen);
  }

 private:
  ModelConfig c_;
  GptConfig decoder_;
};

using Factory = std::unique_ptr<ModelSource> (*)(const ModelConfig&);

// encoder and classifier: the zoo's blocks or BERT's layout.
std::unique_ptr<ModelSource> encoderSource(const ModelConfig& c) {
  if (c.layout == "bert") return std::make_unique<BertSource>(c);
  return std::make_unique<GptSource>(c);
}

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> kinds{
      {"electra", [](const ModelConfig& c) -> std::unique_ptr<ModelSource> { return std::make_unique<ElectraSource>(c); }},
      {"classifier", encoderSource},
      {"encoder", encoderSource},
      {"gpt", [](const ModelConfig& c) -> std::unique_ptr<ModelSource> { return std::make_unique<GptSource>(c); }},
      {"gpt2", [](const ModelConfig& c) -> std::unique_ptr<ModelSource> { return std::make_unique<GptSource>(c); }},
      {"llama", [](const ModelConfig& c) -> std::unique_ptr<ModelSource> { return std::make_unique<LlamaSource>(c); }},
      {"translation",
       [](const ModelConfig& c) -> std::unique_ptr<ModelSource> { return std::make_unique<TranslationSource>(c); }},
      {"torchscript", makeTorchScriptSource},
  };
  return kinds;
}

}  // namespace

std::vector<int64_t> ModelSource::sampleOutputShape(int stage) const {
  auto shape = inputShape(stage + 1, 1);
  shape.erase(shape.begin());
  return shape;
}

std::unique_ptr<DataSource> ModelSource::makeData(const DataConfig& config, int) const {
  if (config.format == "tokens") {
    auto options = sharedDataOptions<TokenDataOptions>(config);
    options.flatDtype = tokenDtype(config.dtype);
    options.vocabSize = config.vocabSize;
    if (config.blend.empty()) options.sources.push_back({config.files, 1.0});
    for (const auto& [files, weight] : config.blend) options.sources.push_back({files, weight});
    return std::make_unique<TokenDataSource>(options);
  }
  auto options = dataOptions<TextDataOptions>(config);
  if (!config.stageFiles.empty()) options.files = config.stageFiles;
  return std::make_unique<TextDataSource>(options);
}

std::vector<std::string> modelKinds() {
  std::vector<std::string> out;
  for (const auto& [kind, factory] : registry()) out.push_back(kind);
  return out;
}

std::unique_ptr<ModelSource> makeModelSource(const ModelConfig& config) {
  const auto it = registry().find(config.kind);
  if (it == registry().end()) {
    std::string valid;
    for (const auto& kind : modelKinds()) valid += (valid.empty() ? "" : ", ") + kind;
    throw Error("unknown model kind \"" + config.kind + "\" (valid: " + valid + ")");
  }
  return it->second(config);
}

}  // namespace skytrain::stages
