#include "daemon/protocol/job_spec.h"

#include <algorithm>
#include <cmath>

#include "daemon/protocol/compression_spec.h"
#include "daemon/protocol/json_reader.h"
#include "daemon/protocol/model_spec_parser.h"
#include "daemon/protocol/placements.h"
#include "scheduler/error.h"
#include "scheduler/schedule.h"

namespace skytrain::protocol {
namespace {

using nlohmann::json;
constexpr int64_t kBig = 1 << 30;

void checkFileCount(const std::vector<std::string>& files, const std::string& path) {
  if (files.empty()) throw SpecError(path, "needs at least one file");
  if (files.size() > 65536) throw SpecError(path, "more than 65536 files");
}

DataSpec parseData(ObjectReader r) {
  DataSpec d;
  d.format = r.string("format", d.format);
  if (d.format != "text" && d.format != "tokens") {
    throw SpecError(r.pathOf("format"), "unknown format \"" + d.format + "\" (valid: text, tokens)");
  }
  if (d.format == "tokens") {
    d.dtype = r.string("dtype", d.dtype);
    if (d.dtype != "uint16" && d.dtype != "int32" && d.dtype != "uint32") {
      throw SpecError(r.pathOf("dtype"), "\"" + d.dtype + "\" is not a dtype of flat token files (valid: uint16, int32, uint32)");
    }
  }
  if (const auto* blend = r.child("blend", false)) {
    if (d.format != "tokens") throw SpecError(r.pathOf("blend"), "blends mix pre-tokenised corpora (format \"tokens\")");
    if (r.has("files")) throw SpecError(r.pathOf("blend"), "give files or blend, not both");
    if (!blend->is_array() || blend->empty() || blend->size() > 256) {
      throw SpecError(r.pathOf("blend"), "expected an array of 1..256 sources");
    }
    for (size_t i = 0; i < blend->size(); ++i) {
      ObjectReader s((*blend)[i], r.pathOf("blend") + "[" + std::to_string(i) + "]");
      BlendSource source;
      source.files = s.strings("files", std::nullopt);
      checkFileCount(source.files, s.pathOf("files"));
      source.weight = s.number("weight", 1.0, 1e-9, 1e9);
      s.finish();
      d.blend.push_back(std::move(source));
    }
  } else {
    d.files = r.strings("files", std::nullopt);
    checkFileCount(d.files, r.pathOf("files"));
  }
  d.sentencepieceModel = r.string("sentencepiece_model", "");
  d.evalFiles = r.strings("eval_files", std::vector<std::string>{});
  if (d.evalFiles.size() > 1024) throw SpecError(r.pathOf("eval_files"), "more than 1024 files");
  d.validationFraction = r.number("validation_fraction", d.validationFraction, 1e-6, 0.5);
  r.finish();
  return d;
}

LossScaleSpec parseLossScale(const json& j, const std::string& path) {
  LossScaleSpec s;
  if (j.is_string() && (j == "none" || j == "dynamic")) {
    s.dynamic = j == "dynamic";
    return s;
  }
  if (!j.is_object()) {
    throw SpecError(path, "expected \"none\", \"dynamic\" or {\"init\": 2^k, \"growth_interval\": n}, got " + describe(j));
  }
  ObjectReader r(j, path);
  s.dynamic = true;
  s.init = r.number("init", s.init, 1.0, std::ldexp(1.0, 127));
  // A power of two, so scaling and unscaling change no digit of any gradient.
  if (int exponent = 0; std::frexp(s.init, &exponent) != 0.5) {
    throw SpecError(r.pathOf("init"), "must be a power of two (2^0 .. 2^127), got " + describe(json(s.init)));
  }
  s.growthInterval = static_cast<int>(r.integer("growth_interval", s.growthInterval, 1, 1000000));
  r.finish();
  return s;
}

OptimizerSpec parseOptimizer(ObjectReader r, int steps) {
  OptimizerSpec o;
  const std::string kind = r.string("kind", "adamw");
  if (kind != "adamw") throw SpecError(r.pathOf("kind"), "unknown optimizer \"" + kind + "\" (valid: adamw)");
  o.lr = r.number("lr", o.lr, 0.0, 10.0);
  o.beta1 = r.number("beta1", o.beta1, 0.0, 0.999999);
  o.beta2 = r.number("beta2", o.beta2, 0.0, 0.999999);
  o.eps = r.number("eps", o.eps, 1e-12, 1.0);
  o.weightDecay = r.number("weight_decay", o.weightDecay, 0.0, 10.0);
  if (r.has("no_decay")) {
    o.noDecay = r.strings("no_decay", std::nullopt);
    if (o.noDecay->size() > kMaxNoDecayPatterns) {
      throw SpecError(r.pathOf("no_decay"), "more than " + std::to_string(kMaxNoDecayPatterns) + " patterns");
    }
  }
  o.schedule = r.string("schedule", o.schedule);
  if (o.schedule != "constant" && o.schedule != "cosine" && o.schedule != "linear") {
    throw SpecError(r.pathOf("schedule"), "unknown schedule \"" + o.schedule + "\" (valid: constant, cosine, linear)");
  }
  o.warmupSteps = static_cast<int>(r.integer("warmup_steps", defaultWarmupSteps(steps), 0, kBig));
  o.minLr = r.number("min_lr", o.minLr, 0.0, 10.0);
  if (o.minLr > o.lr) throw SpecError(r.pathOf("min_lr"), "is above lr");
  o.clipNorm = r.number("clip_norm", o.clipNorm, 0.0, 1e9);
  o.zero = static_cast<int>(r.integer("zero", o.zero, 0, 1));
  o.onNonfinite = r.string("on_nonfinite", o.onNonfinite);
  if (o.onNonfinite != "fail" && o.onNonfinite != "skip") {
    throw SpecError(r.pathOf("on_nonfinite"), "\"" + o.onNonfinite + "\" is not fail or skip");
  }
  if (const json* s = r.child("loss_scale", false)) o.lossScale = parseLossScale(*s, r.pathOf("loss_scale"));
  r.finish();
  return o;
}

EvalSpec parseEval(ObjectReader r) {
  EvalSpec e;
  e.interval = static_cast<int>(r.integer("interval", e.interval, 0, kBig));
  e.samples = static_cast<int>(r.integer("samples", e.samples, 1, 1 << 20));
  r.finish();
  return e;
}

CheckpointSpec parseCheckpoint(ObjectReader r) {
  CheckpointSpec c;
  c.interval = static_cast<int>(r.integer("interval", c.interval, 0, kBig));
  c.keep = static_cast<int>(r.integer("keep", c.keep, 1, 1000));
  r.finish();
  return c;
}

FailureSpec parseFailure(ObjectReader r) {
  FailureSpec f;
  f.heartbeatS = r.number("heartbeat_s", f.heartbeatS, 0.05, 3600);
  f.misses = static_cast<int>(r.integer("misses", f.misses, 1, 1000));
  f.maxRestarts = static_cast<int>(r.integer("max_restarts", f.maxRestarts, 0, 1000));
  f.restartTimeoutS = r.number("restart_timeout_s", f.restartTimeoutS, 0, 86400 * 7);
  r.finish();
  return f;
}

std::vector<int64_t> parseShape(ObjectReader& r, const std::string& key) {
  return parseSampleShape(*r.child(key, true), r.pathOf(key));
}

// An ELECTRA stage: a generator (with its own text) or, last, the discriminator.
StageSpec parseElectraStage(ObjectReader r, bool last) {
  StageSpec s;
  s.daemon = r.string("daemon", std::nullopt);
  s.key = r.string("key", "");
  if (r.has("layers")) throw SpecError(r.pathOf("layers"), "an ELECTRA stage holds a whole generator or discriminator");
  if (last && r.has("data_files")) {
    throw SpecError(r.pathOf("data_files"), "the discriminator reads no text: the generators send it token IDs");
  }
  s.dataFiles = r.strings("data_files", std::vector<std::string>{});
  if (s.dataFiles.size() > 1024) throw SpecError(r.pathOf("data_files"), "more than 1024 files");
  r.finish();
  return s;
}

// A TorchScript stage: its file, and (after the first) the shape it takes.
StageSpec parseTorchScriptStage(ObjectReader r, size_t index) {
  StageSpec s;
  s.daemon = r.string("daemon", std::nullopt);
  s.key = r.string("key", "");
  s.module = r.string("module", std::nullopt);
  if (s.module.empty() || s.module.size() > 4096) throw SpecError(r.pathOf("module"), "must be a file path");
  if (r.has("layers")) throw SpecError(r.pathOf("layers"), "is for zoo models; a TorchScript stage is its module");
  if (index == 0 && r.has("input_shape")) {
    throw SpecError(r.pathOf("input_shape"), "the first stage takes token ids [batch, model.seq_len]");
  }
  if (index > 0 && r.has("input_shape")) s.inputShape = parseShape(r, "input_shape");  // else inferred
  r.finish();
  return s;
}

// A translation stage: the whole encoder (stage 0) or the whole decoder (stage 1).
StageSpec parseTranslationStage(ObjectReader r) {
  StageSpec s;
  s.daemon = r.string("daemon", std::nullopt);
  s.key = r.string("key", "");
  if (r.has("layers")) throw SpecError(r.pathOf("layers"), "a translation stage holds the whole encoder or decoder");
  s.initFrom = parseInitFrom(r);
  r.finish();
  return s;
}

StageSpec parseStage(ObjectReader r, int modelLayers) {
  StageSpec s;
  s.daemon = r.string("daemon", std::nullopt);
  s.key = r.string("key", "");
  s.initFrom = parseInitFrom(r);
  if (r.has("module") || r.has("input_shape")) {
    throw SpecError(r.pathOf(r.has("module") ? "module" : "input_shape"), "is for model.kind \"torchscript\"");
  }
  const json* layers = r.child("layers", true);
  const std::string path = r.pathOf("layers");
  if (!layers->is_array() || layers->size() != 2 || !(*layers)[0].is_number_integer() ||
      !(*layers)[1].is_number_integer()) {
    throw SpecError(path, "expected [first, end] (two integers), got " + describe(*layers));
  }
  s.firstLayer = (*layers)[0].get<int>();
  s.lastLayer = (*layers)[1].get<int>();
  if (s.firstLayer < 0 || s.lastLayer <= s.firstLayer || s.lastLayer > modelLayers) {
    throw SpecError(path, "range " + describe(*layers) + " must satisfy 0 <= first < end <= model.layers (" +
                              std::to_string(modelLayers) + ")");
  }
  r.finish();
  return s;
}

// fp16 autocast runs on CUDA devices only (LibTorch's CPU autocast is bf16); dynamic loss
// scaling needs every stage to agree on a step's skip before the next step's loss is taken.
void checkLossScaling(const JobSpec& spec) {
  if (spec.precision == "fp16") {
    for (size_t i = 0; i < spec.stages.size(); ++i) {
      std::vector<std::string> devices{spec.stages[i].device};
      for (const auto& copy : spec.stages[i].replicas) devices.push_back(copy.device);
      for (const auto& device : devices) {
        if (device.rfind("cuda", 0) != 0) {
          throw SpecError("$.precision", "fp16 computes on CUDA devices only, and stage " + std::to_string(i) +
                                             " has a copy on " + device + " (use bf16 on CPUs)");
        }
      }
    }
  }
  if (!spec.optimizer.lossScale.dynamic) return;
  if (spec.update != "sync") {
    throw SpecError("$.optimizer.loss_scale", "dynamic loss scaling with the delayed update is not built: a step's "
                                              "loss is taken before the previous step's overflow is known (use update \"sync\")");
  }
  if (isFanIn(spec)) {
    throw SpecError("$.optimizer.loss_scale", "dynamic loss scaling is not built for a fan-in (" + spec.model.kind + ")");
  }
}

}  // namespace

int defaultWarmupSteps(int steps) { return std::min(2000, steps / 20); }

double learningRate(const OptimizerSpec& o, int64_t step, int64_t totalSteps) {
  if (step < o.warmupSteps) return o.lr * static_cast<double>(step + 1) / o.warmupSteps;
  if (o.schedule == "constant") return o.lr;
  const double span = static_cast<double>(std::max<int64_t>(1, totalSteps - 1 - o.warmupSteps));
  const double progress = std::min(1.0, static_cast<double>(step - o.warmupSteps) / span);
  const double shape = o.schedule == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return o.minLr + (o.lr - o.minLr) * shape;
}

std::string sampleShapeProblem(const std::vector<int64_t>& shape) {
  if (shape.empty() || shape.size() > 8) return "expected 1..8 dimensions of one sample";
  int64_t elements = 1;
  for (const int64_t d : shape) {
    if (d < 1 || d > kMaxSampleElements) {
      return "dimensions must be integers in [1, " + std::to_string(kMaxSampleElements) + "]";
    }
    elements *= d;
    if (elements > kMaxSampleElements) return "over " + std::to_string(kMaxSampleElements) + " elements a sample";
  }
  return "";
}

std::vector<int64_t> parseSampleShape(const json& value, const std::string& path) {
  if (!value.is_array() || value.size() > 8) {
    throw SpecError(path, "expected 1..8 dimensions of one sample, got " + describe(value));
  }
  std::vector<int64_t> shape;
  for (const auto& d : value) {
    if (!d.is_number_integer()) {
      throw SpecError(path, "dimensions must be integers in [1, " + std::to_string(kMaxSampleElements) + "], got " +
                                describe(value));
    }
    shape.push_back(d.get<int64_t>());
  }
  if (const std::string problem = sampleShapeProblem(shape); !problem.empty()) {
    throw SpecError(path, describe(value) + ": " + problem);
  }
  return shape;
}

JobSpec parseJobSpec(const std::string& text) {
  const json document = parseBoundedJson(text, kMaxSpecBytes, kMaxSpecDepth);
  ObjectReader r(document, "$");
  JobSpec spec;
  spec.name = r.string("name", spec.name);
  if (spec.name.empty() || spec.name.size() > 128) throw SpecError("$.name", "must be 1..128 characters");
  spec.seed = static_cast<uint64_t>(r.integer("seed", 0, 0, INT64_MAX));
  spec.steps = static_cast<int>(r.integer("steps", spec.steps, 1, kBig));
  spec.batchSize = static_cast<int>(r.integer("batch_size", spec.batchSize, 1, 1 << 20));
  if (const json* m = r.child("micro_batches", false); m && !(m->is_string() && *m == "auto")) {
    if (!m->is_number_integer() || m->get<int64_t>() < 1 || m->get<int64_t>() > spec.batchSize) {
      throw SpecError("$.micro_batches", "expected \"auto\" or an integer in [1, batch_size], got " + describe(*m));
    }
    spec.microBatches = m->get<int>();
    if (spec.batchSize % spec.microBatches != 0) {
      throw SpecError("$.micro_batches", std::to_string(spec.microBatches) + " does not divide batch_size " +
                                             std::to_string(spec.batchSize));
    }
  }
  spec.schedule = r.string("schedule", spec.schedule);
  if (spec.schedule != "auto" && !scheduler::parseScheduleKind(spec.schedule)) {
    throw SpecError("$.schedule", "unknown schedule \"" + spec.schedule + "\" (valid: gpipe, 1f1b, 1f1b-delay, zb-h1, auto)");
  }
  spec.precision = r.string("precision", spec.precision);
  if (spec.precision != "fp32" && spec.precision != "bf16" && spec.precision != "fp16") {
    throw SpecError("$.precision", "unknown precision \"" + spec.precision + "\" (valid: fp32, bf16, fp16)");
  }
  spec.update = r.string("update", spec.update);
  if (spec.update != "sync" && spec.update != "delayed") {
    throw SpecError("$.update", "unknown update \"" + spec.update + "\" (valid: sync, delayed)");
  }
  if (spec.update == "delayed" && spec.schedule == "gpipe") {
    throw SpecError("$.update", "the delayed update overlaps steps with 1F1B; schedule gpipe cannot (use 1f1b, 1f1b-delay or auto)");
  }
  if (spec.update == "delayed" && spec.schedule == "zb-h1") {
    throw SpecError("$.update", "the delayed update with schedule zb-h1 is not built (use 1f1b, 1f1b-delay or auto)");
  }
  spec.peerTimeoutS = r.number("peer_timeout_s", spec.peerTimeoutS, 0.1, 86400);
  spec.model = parseModelSpec(ObjectReader(*r.child("model", true), "$.model"));
  spec.data = parseData(ObjectReader(*r.child("data", true), "$.data"));
  const json* optimizer = r.child("optimizer", false);
  if (optimizer) {
    spec.optimizer = parseOptimizer(ObjectReader(*optimizer, "$.optimizer"), spec.steps);
  } else {
    spec.optimizer.warmupSteps = defaultWarmupSteps(spec.steps);
  }
  if (spec.precision == "fp16" && !(optimizer && optimizer->is_object() && optimizer->contains("loss_scale"))) {
    spec.optimizer.lossScale.dynamic = true;  // fp16 gradients underflow without it
  }
  if (spec.update == "delayed" && spec.optimizer.zero > 0) {
    throw SpecError("$.optimizer.zero", "ZeRO-1 with the delayed update is not built (use update \"sync\")");
  }
  if (const json* c = r.child("compression", false)) {
    spec.compression = parseCompression(ObjectReader(*c, "$.compression"));
  } else if (spec.precision != "fp32" && spec.model.kind != "electra") {
    spec.compression.forward = spec.compression.backward = spec.precision;  // what the stages compute in
  }
  if (const json* e = r.child("eval", false)) spec.eval = parseEval(ObjectReader(*e, "$.eval"));
  if (const json* c = r.child("checkpoint", false)) spec.checkpoint = parseCheckpoint(ObjectReader(*c, "$.checkpoint"));
  if (const json* f = r.child("failure", false)) spec.failure = parseFailure(ObjectReader(*f, "$.failure"));
  const json* stages = r.child("stages", true);
  if (!stages->is_array() || stages->empty() || stages->size() > 64) {
    throw SpecError("$.stages", "expected an array of 1..64 stages, got " + describe(*stages));
  }
  for (size_t i = 0; i < stages->size(); ++i) {
    const std::string path = "$.stages[" + std::to_string(i) + "]";
    ObjectReader stage((*stages)[i], path);
    const std::string device = parseDevice(stage);
    std::vector<Placement> replicas = parseReplicas(stage);
    if (spec.model.kind == "torchscript") {
      spec.stages.push_back(parseTorchScriptStage(stage, i));
    } else if (spec.model.kind == "electra") {
      spec.stages.push_back(parseElectraStage(stage, i + 1 == stages->size()));
    } else if (spec.model.kind == "translation") {
      spec.stages.push_back(parseTranslationStage(stage));
    } else {
      spec.stages.push_back(parseStage(stage, spec.model.layers));
    }
    checkEndpoint(spec.stages.back().daemon, spec.stages.back().key, path);
    spec.stages.back().device = device;
    spec.stages.back().replicas = std::move(replicas);
  }
  checkReplicas(spec);
  if (isLayered(spec.model.kind)) checkTiling(spec.stages, spec.model.layers);
  if (spec.model.kind == "translation" && spec.stages.size() != 2) {
    throw SpecError("$.stages", "a translation model has two stages: the encoder, then the decoder");
  }
  if (spec.model.kind == "electra") {
    if (spec.stages.size() < 2) throw SpecError("$.stages", "ELECTRA needs at least one generator and the discriminator");
    if (static_cast<int64_t>(spec.stages.size() - 1) * (spec.microBatches > 0 ? spec.microBatches : spec.batchSize) > 65535) {
      throw SpecError("$.stages", "generators times micro-batches must stay within 65535");
    }
  }
  checkPredictive(spec);
  if (spec.data.format == "tokens" && (spec.model.kind == "classifier" || spec.model.kind == "translation" ||
                                       spec.model.kind == "electra")) {
    throw SpecError("$.data.format", "a " + spec.model.kind + " reads " +
                                         (spec.model.kind == "classifier" ? "labelled lines" : spec.model.kind == "translation" ? "aligned pairs" : "text per generator") +
                                         ", not a pre-tokenised corpus");
  }
  if ((spec.model.tieEmbeddings || !spec.model.tied.empty()) && spec.stages.size() > 1 && spec.update != "sync") {
    throw SpecError("$.update", "tied embeddings across stages sum their gradients every step: only \"sync\" "
                                "(or model.tie_embeddings false)");
  }
  checkLossScaling(spec);
  spec.maxStaleness = static_cast<int>(r.integer("max_staleness", spec.maxStaleness, 0, 1000));
  if (spec.model.kind == "electra") {
    // Generators send token IDs: the tokens codec (alone or under zstd), by default alone.
    auto& c = spec.compression;
    if (c.forward == "none" || c.forward == "auto") c.forward = "tokens";
    if (c.forward != "tokens" && c.forward != "tokens+zstd") {
      throw SpecError("$.compression.forward", "\"" + c.forward + "\": ELECTRA links carry token IDs (tokens or tokens+zstd)");
    }
    if (c.warmupSteps > 0) throw SpecError("$.compression.warmup_steps", "ELECTRA links carry token IDs: no warm-up codec");
    if (spec.update != "sync") throw SpecError("$.update", "a fan-in trains each stage on its own: only \"sync\"");
  }
  r.finish();
  return spec;
}

}  // namespace skytrain::protocol
