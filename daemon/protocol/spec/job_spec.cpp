#include "daemon/protocol/spec/job_spec.h"

#include "daemon/protocol/spec/compression_spec.h"
#include "daemon/protocol/json_reader.h"
#include "daemon/protocol/spec/model_spec_parser.h"
#include "daemon/protocol/spec/optimizer_spec.h"
#include "daemon/protocol/spec/placements.h"
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
  f.heal = r.boolean("heal", f.heal);
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

}  // namespace

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
  spec.optimizer = parseOptimizer(r.child("optimizer", false), spec.steps, spec.precision);
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
  // A learned code at each cut: the model's cuts are the stage boundaries.
  for (size_t i = 1; i < spec.stages.size() && spec.model.subspace.atCuts(); ++i) {
    spec.model.subspace.cuts.push_back(spec.stages[i].firstLayer);
  }
  for (size_t i = 0; i < spec.stages.size() && spec.model.subspace.enabled(); ++i) {
    if (!spec.stages[i].initFrom.empty()) {
      throw SpecError("$.stages[" + std::to_string(i) + "].init_from",
                      "cannot be combined with model.subspace: converting a pretrained model reads every "
                      "block's output projections on every stage; give the whole model as model.init_from");
    }
  }
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
  checkPrecision(spec);
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
