// JobSpec: what a user submits, parsed and validated once, at the edge.
// docs/job-spec.md documents every field (job_spec_docs_test checks it against this parser).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace skytrain::protocol {

// Where one copy of a stage runs: a daemon, and the device on it.
struct Placement {
  std::string daemon;            // control endpoint of the daemon hosting the copy
  std::string key;               // its CURVE public key (Z85); empty: from the known daemons
  std::string device = "cpu";    // "cpu", "cuda" or "cuda:N"
};

struct StageSpec {
  std::string daemon;  // control endpoint of the daemon hosting the stage (replica 0)
  std::string key;     // its CURVE public key (Z85); empty: from the known daemons
  std::string device = "cpu";  // "cpu", "cuda" or "cuda:N": where replica 0 computes
  // Data-parallel copies beyond the first, on daemons of the same cluster (or other devices
  // of the same daemon). Every stage of a job has the same number of copies: replica r of
  // stage i exchanges frames with replica r of its neighbours, one pipeline per replica.
  std::vector<Placement> replicas;
  int firstLayer = 0;  // blocks [firstLayer, lastLayer) (zoo models)
  int lastLayer = 0;
  std::vector<std::string> dataFiles;  // electra producers: this stage's text (else data.files)
  std::string module;  // model.kind "torchscript": the stage's TorchScript file
  // torchscript, stages after the first: per-sample input. Empty: inferred when the job is
  // prepared, from the previous stage's output on two zero samples (StagePrepare::inputShape).
  std::vector<int64_t> inputShape;
  std::vector<std::string> initFrom;  // this stage's own starting weights, after model.init_from
};

// A low-rank split point (stages/models/gpt.h): the layer of a block factored as U S V with rank r.
struct SplitPointSpec {
  int block = -1;  // -1: none
  std::string layer = "fc";  // "fc" or "proj"
  int rank = 8;
  bool keepResidual = false;
};

// A subspace model: k numbers a token cross each cut, each way, by construction
// (stages/models/gpt.h). Method "shared" (Protocol Models): every block writes into one fixed
// k-dimensional subspace of the residual stream. Method "cut": the blocks are unconstrained,
// and at each stage boundary a learned code of k numbers a token (encode on the stage before,
// decode plus an anchor embedding of the token ids on the stage after) is the model's hidden
// state there; the model so depends on where the stages cut it.
struct SubspaceSpec {
  int rank = 0;  // k; 0: off
  std::string method = "shared";  // or "cut"
  std::vector<int> cuts;  // method "cut": the layers the stages start at after the first (from $.stages)
  // Method "cut": the weight of each sender's own next-token loss (a head of its own on the
  // state it encodes; stages/models/gpt.h); 0: none.
  double senderLoss = 0;
  bool enabled() const { return rank > 0; }
  bool atCuts() const { return rank > 0 && method == "cut"; }
};

// The model kinds a spec may name (stages/models/model_source.h has their sources).
inline const std::vector<std::string>& modelKinds() {
  static const std::vector<std::string> kinds{"classifier", "electra", "encoder", "gpt", "gpt2", "llama",
                                                 "torchscript", "translation"};
  return kinds;
}

struct ModelSpec {
  std::string kind = "gpt";
  std::string preset;  // a named size (model_presets.h) the fields below start from; empty: none
  // encoder, classifier: "gpt" (the zoo's pre-norm blocks) or "bert" (BERT's exact layout).
  std::string layout = "gpt";
  int typeVocab = 2;  // bert layout: token types (segments)
  std::string loss = "cross_entropy";  // or "module": the last TorchScript stage's loss()
  int vocabSize = 256;
  int dModel = 128;
  int heads = 4;
  int layers = 4;
  int dFf = 512;
  int seqLen = 64;
  double dropout = 0.0;
  // llama: grouped-query attention's key/value heads (default: heads), rotary base, RMSNorm eps.
  int kvHeads = 0;
  double ropeTheta = 10000.0;
  double normEps = 1e-5;
  // gpt2, bert: rows of the learned position table; llama: the context the model is made for
  // (config.json's max_position_embeddings). Default: seq_len, which may be shorter.
  int positions = 0;
  // llama, gpt2: the output head is the token embedding's matrix (gpt2's default: true).
  bool tieEmbeddings = false;
  // "block": each block's activations are recomputed in the backward instead of kept (only
  // its input is), for one more forward of compute; "none": kept.
  std::string recompute = "none";
  // torchscript: pairs {a parameter of the first stage's module, one of the last's} that are
  // one matrix (a tied embedding and head), kept equal across stages as tie_embeddings does.
  std::vector<std::pair<std::string, std::string>> tied;
  SplitPointSpec splitPoint;
  SubspaceSpec subspace;
  // ELECTRA: each generator's sizes (the fields above are the discriminator's), and the
  // share of tokens the generators mask.
  struct Generator {
    int dModel = 64;
    int heads = 2;
    int layers = 4;
    int dFf = 256;
  } generator;
  double maskRate = 0.15;
  // classifier: the labels (data files are "label<TAB>text" lines), in class-index order.
  std::vector<std::string> classes;
  // Starting weights: safetensors files (a skytrain checkpoint's stage files among them)
  // whose tensors are matched to the stages' parameters by name. Empty: from the seed.
  std::vector<std::string> initFrom;
  // Shell-glob patterns of the parameters that train; the rest are frozen. Empty: all train.
  std::vector<std::string> trainable;
  // Bottleneck width of an adapter on every sub-layer's output (zoo blocks); 0: none.
  int adapter = 0;
  // translation: the decoder's blocks (model.layers is the encoder's).
  int decoderLayers = 0;
};

// One source of a blend of pre-tokenised corpora: its shards and its share of the samples.
struct BlendSource {
  std::vector<std::string> files;
  double weight = 1.0;
};

struct DataSpec {
  // "text": files are plain text, tokenised at start (small data). "tokens": files are
  // pre-tokenised shards (stages/tokens/token_files.h) or directories `skytrain data prepare` wrote,
  // memory-mapped; `blend` mixes several such sources by weight instead of `files`.
  std::string format = "text";
  std::string dtype = "uint16";  // tokens: of flat files (an indexed dataset's .idx names its own)
  std::vector<BlendSource> blend;
  std::vector<std::string> files;
  std::string sentencepieceModel;  // empty: byte-level tokenizer
  std::vector<std::string> evalFiles;  // validation from these (e.g. another language) instead of a held-out share
  double validationFraction = 0.05;
};

// Dynamic loss scaling (daemon/stage/update/loss_scaler.h), as torch.amp.GradScaler: the last stage
// multiplies the loss by `scale`, a power of two, so 16-bit gradients do not underflow; every
// stage divides its gradients by it before the checks, which is exact. A step whose gradients
// overflow anywhere is skipped by every stage and the scale halved; after `growthInterval`
// good steps in a row it doubles. An overflow at scale 1 goes to on_nonfinite.
struct LossScaleSpec {
  bool dynamic = false;
  double init = 65536;  // 2^16
  int growthInterval = 2000;
};

struct OptimizerSpec {
  double lr = 3e-4;  // peak learning rate
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weightDecay = 0.01;
  // Shell globs of the trainable parameters that weight decay skips (AdamW's second group).
  // Absent: the rule every LLM recipe uses, stages::kDefaultNoDecay (parameters of fewer
  // than two dimensions, biases and norm gains, and embedding tables). [] decays everything.
  std::optional<std::vector<std::string>> noDecay;
  // Learning-rate schedule: linear warm-up over warmupSteps to lr, then "constant", or
  // "cosine" / "linear" decay to minLr at the last step. Unless the spec says,
  // warmupSteps is defaultWarmupSteps(steps): a job does not start at its peak rate.
  std::string schedule = "constant";
  int warmupSteps = 0;
  double minLr = 0;
  // Gradient clipping by the global norm over every stage's gradients (0: off), computed
  // as torch.nn.utils.clip_grad_norm_ does in one process. On by default, as in every LLM
  // recipe: a 303M model diverged in three steps without it and without warm-up.
  double clipNorm = 1.0;
  // A NaN or Inf loss or gradient: "fail" the job, or "skip" the step (no update, counted).
  std::string onNonfinite = "fail";
  // 1: ZeRO-1 for replicated stages: each of a stage's R copies keeps AdamW state for its
  // own 1/R of the parameters, updates them, and sends them to the other copies over c10d;
  // the update is the unsharded one to the bit. 0: every copy keeps and updates it all.
  int zero = 0;
  // On by default under precision "fp16", off otherwise.
  LossScaleSpec lossScale;
};

// The warm-up a job of `steps` steps gets when its spec names none: 5% of the steps, at most
// 2000 (a 500-step job warms up over 25, a 100k-step one over 2000; under 20 steps, none).
int defaultWarmupSteps(int steps);
constexpr size_t kMaxNoDecayPatterns = 256;

// The learning rate of 0-based step `step` of `totalSteps`.
double learningRate(const OptimizerSpec& optimizer, int64_t step, int64_t totalSteps);

// Codec specs per direction and per phase (compression/codec_registry.h has the grammar).
struct CompressionSpec {
  std::string forward = "none";   // activations, stage s -> s+1; "auto": the planner picks from `allowed`
  std::string backward = "none";  // activation gradients, stage s+1 -> s; "auto" as above
  // What "auto" chooses from, per link, in order of preference: by default the codecs that
  // keep training's quality (docs/BENCHMARKS.md, "Codec quality over seeds"). A direction's
  // own list ("allowed_forward", "allowed_backward") replaces it for that direction.
  std::vector<std::string> allowed = {"none", "fp16", "bf16", "ef(int8)"};
  std::vector<std::string> allowedForward, allowedBackward;  // empty: `allowed`
  int warmupSteps = 0;            // steps [0, warmupSteps) use `warmup` in both directions
  std::string warmup = "none";

  const std::vector<std::string>& allowedFor(bool forwardDirection) const {
    const auto& own = forwardDirection ? allowedForward : allowedBackward;
    return own.empty() ? allowed : own;
  }

  // The codec specs of a step: {forward, backward}.
  std::pair<std::string, std::string> forStep(int step) const {
    return step < warmupSteps ? std::make_pair(warmup, warmup) : std::make_pair(forward, backward);
  }
};

struct EvalSpec {
  int interval = 0;  // steps between validation passes; 0: only after the last step
  int samples = 64;  // validation sequences per pass
};

// Checkpoints: every `interval` steps (and after the last), each stage writes its state;
// the last `keep` complete checkpoints are kept. interval 0: only after the last step.
struct CheckpointSpec {
  int interval = 50;
  int keep = 3;
};

// Failure handling: heartbeats every heartbeat_s; a daemon silent for `misses` of them is
// lost; the job restarts from its last complete checkpoint up to max_restarts times,
// waiting up to restart_timeout_s for a lost daemon to answer again.
struct FailureSpec {
  double heartbeatS = 1.0;
  int misses = 3;
  int maxRestarts = 3;
  double restartTimeoutS = 60;
  // A replicated job heals in place (heals() below): each step is applied on the
  // coordinator's commit, and a lost copy's pipeline leaves while the others go on.
  bool heal = true;

  double lostAfterS() const { return heartbeatS * misses; }
};

struct JobSpec {
  std::string name = "job";
  uint64_t seed = 0;
  int steps = 100;
  int batchSize = 16;
  int microBatches = 0;            // 0: "auto", the planner picks
  std::string schedule = "auto";  // "gpipe", "1f1b", "1f1b-delay", "zb-h1" or "auto"
  // "sync": every step's update before the next step (the same update as one process).
  // "delayed": the one-step-delayed update (scheduler/schedule.h), steps overlap; 1F1B only.
  // "fp32", "bf16" or "fp16": every stage's forward under autocast (matrix products in the
  // 16-bit type), with fp32 weights, gradients and AdamW state; links then default to that
  // type's codec. fp16 only on CUDA devices, with dynamic loss scaling unless the spec says.
  std::string precision = "fp32";
  std::string update = "sync";
  ModelSpec model;
  DataSpec data;
  OptimizerSpec optimizer;
  CompressionSpec compression;
  EvalSpec eval;
  CheckpointSpec checkpoint;
  FailureSpec failure;
  double peerTimeoutS = 120;  // longest wait for a neighbour's frame before the job fails
  // A fan-in (electra): how many steps a producer may run ahead of the consumer.
  int maxStaleness = 1;
  std::vector<StageSpec> stages;
};

// A fan-in (every stage but the last feeds the last token IDs) rather than a chain.
inline bool isFanIn(const JobSpec& spec) { return spec.model.kind == "electra"; }
// Whether a stage reads the job's data: a chain's first stage (its input) and last (its
// targets), every stage of a subspace model (each rebuilds the hidden state from the token
// ids), a fan-in's producers.
inline bool readsData(const JobSpec& spec, int stage) {
  const bool last = stage + 1 == static_cast<int>(spec.stages.size());
  if (isFanIn(spec)) return !last;
  return stage == 0 || last || spec.model.subspace.enabled();
}
// A kind whose stages after the first take stages[i].input_shape (torchscript): given in
// the spec, or inferred when the job is prepared.
inline bool takesInputShapes(const JobSpec& spec) { return spec.model.kind == "torchscript"; }
// Kinds cut by layer ranges (stages[i].layers) that tile [0, model.layers).
inline bool isLayered(const std::string& kind) {
  return kind == "gpt" || kind == "gpt2" || kind == "llama" || kind == "encoder" || kind == "classifier";
}

// Data parallelism inside the clusters: R copies of every stage form R pipelines, each on
// batch_size / R samples of every step. A (stage, replica) pair is a slot, numbered
// replica-major (slot = replica * stages + stage), so slot i is stage i when R is 1.
inline int replicaCount(const JobSpec& spec) {
  return spec.stages.empty() ? 1 : 1 + static_cast<int>(spec.stages[0].replicas.size());
}
inline int slotCount(const JobSpec& spec) { return static_cast<int>(spec.stages.size()) * replicaCount(spec); }
inline int stageOfSlot(const JobSpec& spec, int slot) { return slot % static_cast<int>(spec.stages.size()); }
inline int replicaOfSlot(const JobSpec& spec, int slot) { return slot / static_cast<int>(spec.stages.size()); }
inline int slotOf(const JobSpec& spec, int stage, int replica) {
  return replica * static_cast<int>(spec.stages.size()) + stage;
}
// Whether a job heals in place when a copy is lost (docs/operations.md, "Failures"): replicated, with
// failure.heal, the synchronous update (the delayed one overlaps steps, so no step
// boundary is a consistent cut), no ZeRO-1 (a lost copy's optimizer shard is gone), a chain.
inline bool heals(const JobSpec& spec) {
  return replicaCount(spec) > 1 && spec.failure.heal && spec.update == "sync" && spec.optimizer.zero == 0 &&
         !isFanIn(spec);
}
// The daemon, key and device of a slot.
Placement placementOf(const JobSpec& spec, int slot);
// "stage 1" or "stage 1 replica 2", for messages.
std::string describeSlot(const JobSpec& spec, int slot);

constexpr size_t kMaxSpecBytes = 1 << 20;
constexpr int kMaxSpecDepth = 16;
constexpr int64_t kMaxSampleElements = int64_t{1} << 24;  // of one sample's input_shape
// Whether a per-sample shape is within bounds (1 to 8 dimensions, each at least 1, at most
// kMaxSampleElements elements in all): "" if so, else what is wrong.
std::string sampleShapeProblem(const std::vector<int64_t>& shape);
// One sample's shape from JSON (a spec's input_shape, a prepare's, a prepare reply's
// output_shape): an array of integers within those bounds. Throws skytrain::SpecError
// naming `path`.
std::vector<int64_t> parseSampleShape(const nlohmann::json& value, const std::string& path);

// Parses and validates a job spec. Throws skytrain::SpecError naming the JSON path and the
// bad value on: invalid JSON, size or depth over the caps, unknown keys, wrong types,
// out-of-range values, a batch not divisible by micro_batches, stage layer ranges that
// overlap, leave a gap or miss the model's ends.
JobSpec parseJobSpec(const std::string& text);

}  // namespace skytrain::protocol
