// A job spec's model and data, as the stages module takes them: the model source's config
// and the data source a stage reads (text, a generator's own text, or labelled text).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "daemon/protocol/spec/job_spec.h"
#include "stages/models/gpt.h"
#include "stages/models/model_source.h"
#include "stages/data/text_data.h"

namespace torch::optim {
class Optimizer;
}

namespace skytrain::daemon {

// The model zoo's config for a job's model spec.
stages::GptConfig gptConfig(const protocol::ModelSpec& model);
stages::LlamaConfig llamaConfig(const protocol::ModelSpec& model);
stages::BertConfig bertConfig(const protocol::ModelSpec& model);
// The model source's config: the kind, the sizes, the loss and each stage's part.
stages::ModelConfig modelConfig(const protocol::JobSpec& spec);
// The job's data as stage `stage`'s model source reads it (ModelSource::makeData).
stages::DataConfig dataConfig(const protocol::JobSpec& spec, int stage);

// The job's AdamW over stage `stage`'s trainable parameters, in two groups: weight decay
// on the matrices, none on what optimizer.no_decay names (stages::splitByDecay; a tied
// head judged as the embedding it copies). The runner and the one-process reference both
// build theirs here, so the two cannot disagree on who decays.
// `owned`: under ZeRO-1 this copy's shard of the parameters (shardOwners), the only ones
// getting AdamW state here (it may be empty); null: all of them.
std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const stages::Stage& model, const protocol::OptimizerSpec& optimizer,
                                                       const std::vector<stages::TiedPair>& tied, int stage,
                                                       const std::vector<at::Tensor>* owned = nullptr);

// ZeRO-1's partition of a stage's trainable parameters over its `replicas` copies: each
// parameter, in order, goes to the copy holding the fewest elements so far (ties: the
// lowest rank). Every copy computes the same partition. Returns each parameter's owner.
std::vector<int> shardOwners(const std::vector<at::Tensor>& parameters, int replicas);

// Throws skytrain::Error naming `device` ("cpu", "cuda", "cuda:N") and `what` when this
// daemon's LibTorch cannot compute on it: never a silent fallback to the CPU.
void checkDevice(const std::string& device, const std::string& what);

}  // namespace skytrain::daemon
