// How a job spec becomes a stage's model source and its data config (the spec's fields
// mapped onto the stages module's plain config structs); which data source a model reads is
// the model source's to say.
#include "daemon/stage/state/model_setup.h"

#include <torch/torch.h>

#include <algorithm>

#include "scheduler/error.h"
#include "stages/weights/weights.h"


namespace skytrain::daemon {

std::vector<int> shardOwners(const std::vector<at::Tensor>& parameters, int replicas) {
  std::vector<int64_t> held(std::max(1, replicas), 0);
  std::vector<int> owners;
  for (const auto& p : parameters) {
    const int owner = static_cast<int>(std::min_element(held.begin(), held.end()) - held.begin());
    held[owner] += p.numel();
    owners.push_back(owner);
  }
  return owners;
}

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const stages::Stage& model, const protocol::OptimizerSpec& o,
                                                       const std::vector<stages::TiedPair>& tied, int stage,
                                                       const std::vector<at::Tensor>* owned) {
  std::map<std::string, std::string> aliases;
  for (const auto& pair : tied) {
    if (pair.secondStage == stage) aliases[pair.secondName] = pair.firstName;
  }
  stages::DecayGroups split = stages::splitByDecay(model, o.noDecay, aliases);
  if (owned) {  // ZeRO-1: this copy's shard only
    auto keep = [&](std::vector<at::Tensor>& group) {
      std::vector<at::Tensor> kept;
      for (auto& p : group) {
        if (std::any_of(owned->begin(), owned->end(), [&](const at::Tensor& q) { return q.is_same(p); })) kept.push_back(p);
      }
      group = std::move(kept);
    };
    keep(split.decay);
    keep(split.noDecay);
  }
  const auto options = torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weightDecay);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!split.decay.empty()) groups.emplace_back(std::move(split.decay), std::make_unique<torch::optim::AdamWOptions>(options));
  if (!split.noDecay.empty()) {
    auto none = std::make_unique<torch::optim::AdamWOptions>(options);
    none->weight_decay(0);
    groups.emplace_back(std::move(split.noDecay), std::move(none));
  }
  return std::make_unique<torch::optim::AdamW>(std::move(groups), options);
}

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
  c.positions = m.positions;
  c.tieEmbeddings = m.tieEmbeddings;
  c.recompute = m.recompute == "block";
  c.subspaceRank = m.subspace.atCuts() ? 0 : m.subspace.rank;
  c.cutRank = m.subspace.atCuts() ? m.subspace.rank : 0;
  c.cuts = m.subspace.cuts;
  c.senderLoss = m.subspace.senderLoss;
  return c;
}

stages::BertConfig bertConfig(const protocol::ModelSpec& m) {
  stages::BertConfig c;
  c.vocabSize = m.vocabSize;
  c.dModel = m.dModel;
  c.heads = m.heads;
  c.layers = m.layers;
  c.dFf = m.dFf;
  c.seqLen = m.seqLen;
  c.positions = m.positions > 0 ? m.positions : m.seqLen;
  c.typeVocab = m.typeVocab;
  c.normEps = m.normEps;
  return c;
}

stages::LlamaConfig llamaConfig(const protocol::ModelSpec& m) {
  stages::LlamaConfig c;
  c.vocabSize = m.vocabSize;
  c.dModel = m.dModel;
  c.heads = m.heads;
  c.kvHeads = m.kvHeads > 0 ? m.kvHeads : m.heads;
  c.layers = m.layers;
  c.dFf = m.dFf;
  c.seqLen = m.seqLen;
  c.ropeTheta = m.ropeTheta;
  c.normEps = m.normEps;
  c.tieEmbeddings = m.tieEmbeddings;
  c.recompute = m.recompute == "block";
  c.subspaceRank = m.subspace.atCuts() ? 0 : m.subspace.rank;
  c.cutRank = m.subspace.atCuts() ? m.subspace.rank : 0;
  c.cuts = m.subspace.cuts;
  c.senderLoss = m.subspace.senderLoss;
  return c;
}

stages::ModelConfig modelConfig(const protocol::JobSpec& spec) {
  stages::ModelConfig c;
  c.kind = spec.model.kind;
  c.gpt = gptConfig(spec.model);
  c.llama = llamaConfig(spec.model);
  c.layout = spec.model.layout;
  c.bert = bertConfig(spec.model);
  c.generator = c.gpt;
  c.generator.dModel = spec.model.generator.dModel;
  c.generator.heads = spec.model.generator.heads;
  c.generator.layers = spec.model.generator.layers;
  c.generator.dFf = spec.model.generator.dFf;
  c.loss = spec.model.loss;
  c.seed = spec.seed;
  c.classes = static_cast<int>(spec.model.classes.size());
  c.decoderLayers = spec.model.decoderLayers;
  c.maskRate = spec.model.maskRate;
  c.tied = spec.model.tied;
  for (const auto& s : spec.stages) c.stages.push_back({s.firstLayer, s.lastLayer, s.module, s.inputShape});
  return c;
}

stages::DataConfig dataConfig(const protocol::JobSpec& spec, int stage) {
  stages::DataConfig c;
  c.format = spec.data.format;
  c.dtype = spec.data.dtype;
  for (const auto& source : spec.data.blend) c.blend.emplace_back(source.files, source.weight);
  c.files = spec.data.files;
  c.stageFiles = spec.stages.at(stage).dataFiles;
  c.evalFiles = spec.data.evalFiles;
  c.sentencepieceModel = spec.data.sentencepieceModel;
  c.validationFraction = spec.data.validationFraction;
  c.classes = spec.model.classes;
  c.seqLen = spec.model.seqLen;
  c.vocabSize = spec.model.vocabSize;
  c.seed = spec.seed;
  return c;
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
