// How a job spec becomes a stage's model source and data source (the spec's fields mapped
// onto the stages module's plain config structs).
#include "daemon/model_setup.h"

#include "scheduler/error.h"

#include "stages/labelled_data.h"
#include "stages/parallel_data.h"

namespace skytrain::daemon {

stages::GptConfig gptConfig(const protocol::ModelSpec& m) {
  stages::GptConfig c;
  c.vocabSize = m.vocabSize;
  c.dModel = m.dModel;
  c.heads = m.heads;
  c.layers = m.layers;
  c.dFf = m.dFf;
  c.seqLen = m.seqLen;
  c.dropout = m.dropout;
  c.split.block = m.splitPoint.block;
  c.split.layer = m.splitPoint.layer == "proj" ? stages::SplitPoint::Layer::Proj : stages::SplitPoint::Layer::Fc;
  c.split.rank = m.splitPoint.rank;
  c.split.keepResidual = m.splitPoint.keepResidual;
  c.adapter = m.adapter;
  return c;
}

stages::ModelConfig modelConfig(const protocol::JobSpec& spec) {
  stages::ModelConfig c;
  c.kind = spec.model.kind;
  c.gpt = gptConfig(spec.model);
  c.generator = c.gpt;
  c.generator.dModel = spec.model.generator.dModel;
  c.generator.heads = spec.model.generator.heads;
  c.generator.layers = spec.model.generator.layers;
  c.generator.dFf = spec.model.generator.dFf;
  c.loss = spec.model.loss;
  c.seed = spec.seed;
  c.classes = static_cast<int>(spec.model.classes.size());
  c.decoderLayers = spec.model.decoderLayers;
  for (const auto& s : spec.stages) c.stages.push_back({s.firstLayer, s.lastLayer, s.module, s.inputShape});
  return c;
}

std::unique_ptr<stages::DataSource> makeDataSource(const protocol::JobSpec& spec, int stage) {
  if (spec.model.kind == "translation") {
    stages::ParallelDataOptions options;
    options.files = spec.data.files;
    options.evalFiles = spec.data.evalFiles;
    options.sentencepieceModel = spec.data.sentencepieceModel;
    options.validationFraction = spec.data.validationFraction;
    options.seqLen = spec.model.seqLen;
    options.vocabSize = spec.model.vocabSize;
    options.seed = spec.seed;
    return std::make_unique<stages::ParallelDataSource>(options);
  }
  if (spec.model.kind == "classifier") {
    stages::LabelledDataOptions options;
    options.files = spec.data.files;
    options.evalFiles = spec.data.evalFiles;
    options.classes = spec.model.classes;
    options.sentencepieceModel = spec.data.sentencepieceModel;
    options.validationFraction = spec.data.validationFraction;
    options.seqLen = spec.model.seqLen;
    options.seed = spec.seed;
    return std::make_unique<stages::LabelledDataSource>(options);
  }
  const auto& own = spec.stages.at(stage).dataFiles;
  stages::TextDataOptions options;
  options.files = own.empty() ? spec.data.files : own;
  options.evalFiles = spec.data.evalFiles;
  options.sentencepieceModel = spec.data.sentencepieceModel;
  options.validationFraction = spec.data.validationFraction;
  options.seqLen = spec.model.seqLen;
  options.seed = spec.seed;
  return std::make_unique<stages::TextDataSource>(options);
}

void checkDevice(const std::string& device, const std::string& what) {
  if (device == "cpu") return;
  const int wanted = device == "cuda" ? 0 : std::stoi(device.substr(5));  // the spec parser checked the form
  if (!torch::cuda::is_available()) {
    throw Error(what + ": device " + device + " is not available on this daemon (its LibTorch " +
                (torch::cuda::device_count() == 0 && !at::hasCUDA() ? std::string("is built without CUDA")
                                                                    : std::string("sees no GPU")) +
                ")");
  }
  if (wanted >= static_cast<int>(torch::cuda::device_count())) {
    throw Error(what + ": device " + device + " is not available on this daemon (it has " +
                std::to_string(torch::cuda::device_count()) + " GPUs)");
  }
}

}  // namespace skytrain::daemon
