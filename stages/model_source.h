// Model sources: where a job's stages come from. The runner names no model; it asks the
// source the job's model.kind selects for stage i, for the shape of what crosses into it,
// and for the estimates admission and the planner need.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stages/gpt.h"
#include "stages/stage.h"

namespace skytrain::stages {

// One stage of a job, as its model source sees it.
struct StageSource {
  int firstLayer = 0;  // zoo models: blocks [firstLayer, lastLayer)
  int lastLayer = 0;
  std::string module;               // torchscript: the stage's TorchScript file
  std::vector<int64_t> inputShape;  // torchscript: per-sample shape of a later stage's input
};

struct ModelConfig {
  std::string kind = "gpt";
  GptConfig gpt;  // the zoo's sizes (ELECTRA: the discriminator's); torchscript uses only vocabSize and seqLen
  GptConfig generator;  // ELECTRA: each generator's sizes
  std::string loss = "cross_entropy";  // or "module": the last TorchScript stage's loss()
  int classes = 0;  // classifier: the number of labels
  int decoderLayers = 0;  // translation: the decoder's blocks (0: as many as the encoder's)
  std::vector<StageSource> stages;
  uint64_t seed = 0;
};

class ModelSource {
 public:
  virtual ~ModelSource() = default;
  // Builds stage i with its initial weights. Throws skytrain::Error naming what is wrong
  // (for a TorchScript stage: the file and why it cannot serve as stage i).
  virtual std::unique_ptr<Stage> build(int stage) const = 0;
  // The input of stage i for `samples` samples: token ids [samples, T] on the first stage,
  // else the float32 tensor the previous stage sends.
  virtual std::vector<int64_t> inputShape(int stage, int64_t samples) const = 0;
  // Bytes of weights stage i holds (float32), known before it is built.
  virtual double weightBytes(int stage) const = 0;
  // Activation memory stage i keeps per in-flight sample for its backward; 0 when unknown.
  virtual double stashBytesPerSample(int stage) const = 0;
  // A fan-in: every stage but the last is a producer with its own data and loss, feeding
  // token IDs to the last (no gradient flows back). Otherwise a chain.
  virtual bool fanIn() const { return false; }
  // What stage i's parameter names start with ("encoder." in a translation model): init_from
  // also finds a parameter under its name without it (a pretrained trunk's file).
  virtual std::string namePrefix(int stage) const { return ""; }
};

// The registry of model kinds: "gpt" (the zoo's decoder), "encoder" (the same blocks,
// bidirectional, with an MLM head), "classifier" (the encoder with a head over labels,
// pooled over the sequence), "electra" (generators feeding one discriminator: a fan-in),
// "translation" (an encoder stage and a decoder stage, stages/translation.h) and
// "torchscript". Throws
// skytrain::Error listing the valid kinds on an unknown one.
std::unique_ptr<ModelSource> makeModelSource(const ModelConfig& config);
std::vector<std::string> modelKinds();

}  // namespace skytrain::stages
