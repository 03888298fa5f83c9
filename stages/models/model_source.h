// Model sources: where a job's stages come from. The runner names no model; it asks the
// source the job's model.kind selects for stage i, for the shape of what crosses into it,
// and for the estimates admission and the planner need.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stages/models/bert.h"
#include "stages/models/gpt.h"
#include "stages/models/llama.h"
#include "stages/objective.h"
#include "stages/stage.h"
#include "stages/data/text_data.h"

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
  LlamaConfig llama;  // llama: the same sizes with the family's own fields
  std::string layout = "gpt";  // encoder, classifier: "gpt" (the zoo's blocks) or "bert"
  BertConfig bert;             // the bert layout's sizes
  GptConfig generator;  // ELECTRA: each generator's sizes
  std::string loss = "cross_entropy";  // or "module": the last TorchScript stage's loss()
  int classes = 0;  // classifier: the number of labels
  int decoderLayers = 0;  // translation: the decoder's blocks (0: as many as the encoder's)
  std::vector<StageSource> stages;
  uint64_t seed = 0;
  double maskRate = 0.15;  // masked models: the share of positions masked
  // torchscript: parameters the first stage's module and the last's hold as one matrix
  // ({first stage's name, last stage's name}), kept equal as tied embeddings are.
  std::vector<std::pair<std::string, std::string>> tied;
};

// The job's data, as a model source's data source takes it.
struct DataConfig {
  std::string format = "text";  // or "tokens": pre-tokenised shards (stages/data/token_data.h)
  std::string dtype = "uint16";  // tokens: of flat files
  std::vector<std::pair<std::vector<std::string>, double>> blend;  // tokens: sources and weights; empty: files
  std::vector<std::string> files;
  std::vector<std::string> stageFiles;  // this stage's own files (a producer's language); empty: files
  std::vector<std::string> evalFiles;
  std::string sentencepieceModel;  // empty: the byte tokenizer
  double validationFraction = 0.05;
  std::vector<std::string> classes;  // labelled text: the labels
  int seqLen = 64;
  int vocabSize = 0;
  uint64_t seed = 0;
};

// One matrix that two stages hold a copy of (tied embeddings: the first stage's input
// embedding and the last stage's head). The runner sums the two gradients every step, so
// the copies stay bit-identical.
struct TiedPair {
  int firstStage = 0;
  std::string firstName;
  int secondStage = 0;
  std::string secondName;
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
  // One sample's shape of what stage i (not the last) sends on: by default the next stage's
  // input. A TorchScript stage runs its module on two zero samples to find out (a module is
  // code), so a later stage's input_shape may be left out of the spec. Throws
  // skytrain::Error naming the file when the module cannot run.
  virtual std::vector<int64_t> sampleOutputShape(int stage) const;
  // Bytes of weights stage i holds (float32), known before it is built.
  virtual double weightBytes(int stage) const = 0;
  // Of weightBytes, what never trains and is no parameter (a subspace model's frozen frame):
  // no gradient, no optimizer state, no per-operation casts.
  virtual double frozenBytes(int stage) const { return 0; }
  // Activation memory stage i keeps per in-flight sample for its backward; 0 when unknown.
  virtual double stashBytesPerSample(int stage) const = 0;
  // A fan-in: every stage but the last is a producer with its own data and loss, feeding
  // token IDs to the last (no gradient flows back). Otherwise a chain.
  virtual bool fanIn() const { return false; }
  // What stage i's parameter names start with ("encoder." in a translation model): init_from
  // also finds a parameter under its name without it (a pretrained trunk's file).
  virtual std::string namePrefix(int stage) const { return ""; }
  // What stage i reads, when it reads data (a chain's first and last stage, a fan-in's
  // producers): plain text by default, aligned pairs for translation, labelled lines for a
  // classifier. Throws skytrain::Error naming a file that cannot be read.
  virtual std::unique_ptr<DataSource> makeData(const DataConfig& config, int stage) const;
  // The objective of this kind (objective.h) over the data source stage i reads; `data` is
  // null on a stage that reads none (a chain's middle, a fan-in's consumer).
  virtual std::unique_ptr<Objective> objective(const DataSource* data) const { return makeLanguageModelObjective(); }
  // The matrices two stages share (none: every parameter lives on one stage).
  virtual std::vector<TiedPair> tied() const { return {}; }
};

// The registry of model kinds: "gpt" (the zoo's decoder), "gpt2" (the same blocks as GPT-2
// has them: tanh GELU, a position table of its own length, tied embeddings), "llama"
// (stages/models/llama.h), "encoder" (the same blocks,
// bidirectional, with an MLM head), "classifier" (the encoder with a head over labels,
// pooled over the sequence), "electra" (generators feeding one discriminator: a fan-in),
// "translation" (an encoder stage and a decoder stage, stages/models/translation.h) and
// "torchscript". Throws
// skytrain::Error listing the valid kinds on an unknown one.
std::unique_ptr<ModelSource> makeModelSource(const ModelConfig& config);
std::vector<std::string> modelKinds();

}  // namespace skytrain::stages
