#include "daemon/protocol/job_spec.h"

#include <algorithm>
#include <cmath>

#include "daemon/protocol/compression_spec.h"
#include "daemon/protocol/json_reader.h"
#include "daemon/protocol/model_presets.h"
#include "daemon/protocol/placements.h"
#include "scheduler/error.h"
#include "scheduler/schedule.h"

namespace skytrain::protocol {
namespace {

using nlohmann::json;
constexpr int64_t kBig = 1 << 30;

SplitPointSpec parseSplitPoint(ObjectReader r, const ModelSpec& m) {
  SplitPointSpec s;
  s.block = static_cast<int>(r.integer("block", std::nullopt, 0, m.layers - 1));
  s.layer = r.string("layer", s.layer);
  if (s.layer != "fc" && s.layer != "proj") {
    throw SpecError(r.pathOf("layer"), "\"" + s.layer + "\" is not a factorable layer (valid: fc, proj)");
  }
  s.rank = static_cast<int>(r.integer("rank", s.rank, 1, std::min(m.dModel, m.dFf)));
  s.keepResidual = r.boolean("keep_residual", s.keepResidual);
  r.finish();
  return s;
}

// init_from: a file or an array of files (safetensors, or a skytrain checkpoint's).
std::vector<std::string> parseInitFrom(ObjectReader& r) {
  std::vector<std::string> out;
  const json* init = r.child("init_from", false);
  if (!init) return out;
  const std::string path = r.pathOf("init_from");
  const json files = init->is_string() ? json::array({*init}) : *init;
  if (!files.is_array() || files.empty() || files.size() > 256) {
    throw SpecError(path, "expected a file or an array of 1..256 files, got " + describe(*init));
  }
  for (const auto& f : files) {
    if (!f.is_string() || f.get<std::string>().empty() || f.get<std::string>().size() > 4096) {
      throw SpecError(path, describe(f) + " is not a file path");
    }
    out.push_back(f.get<std::string>());
  }
  return out;
}

ModelSpec parseModel(ObjectReader r) {
  ModelSpec m;
  m.kind = r.string("kind", m.kind);
  const auto& kinds = modelKinds();
  if (std::find(kinds.begin(), kinds.end(), m.kind) == kinds.end()) {
    std::string valid;
    for (const auto& kind : kinds) valid += (valid.empty() ? "" : ", ") + kind;
    throw SpecError(r.pathOf("kind"), "unknown model kind \"" + m.kind + "\" (valid: " + valid + ")");
  }
  m.loss = r.string("loss", m.loss);
  if (m.loss != "cross_entropy" && !(m.loss == "module" && m.kind == "torchscript")) {
    throw SpecError(r.pathOf("loss"), "unknown loss \"" + m.loss + "\" (valid: cross_entropy" +
                                          (m.kind == "torchscript" ? ", module)" : "; module needs kind torchscript)"));
  }
  if (m.kind == "encoder" || m.kind == "classifier") {
    m.layout = r.string("layout", m.layout);
    if (m.layout != "gpt" && m.layout != "bert") {
      throw SpecError(r.pathOf("layout"), "unknown layout \"" + m.layout + "\" (valid: gpt, bert)");
    }
  }
  const bool bert = m.layout == "bert";
  if (bert) m.normEps = 1e-12;
  // The presets of a kind: its own, and BERT's for the bert layout.
  const std::string presetKind = bert ? "bert" : m.kind;
  if (const json* preset = r.child("preset", false)) {
    const std::string name = preset->is_string() ? preset->get<std::string>() : "";
    const ModelPreset* p = findPreset(name);
    if (!p || p->kind != presetKind) {
      std::string valid;
      for (const auto& each : modelPresets()) {
        if (each.kind == presetKind) valid += (valid.empty() ? "" : ", ") + each.name;
      }
      throw SpecError(r.pathOf("preset"), describe(*preset) + " is not a preset of " +
                                               (bert ? std::string("the bert layout") : "kind \"" + m.kind + "\"") +
                                               " (valid: " + (valid.empty() ? "none" : valid) + ")");
    }
    m.preset = p->name;
    m.vocabSize = p->vocabSize, m.dModel = p->dModel, m.heads = p->heads, m.kvHeads = p->kvHeads;
    m.layers = p->layers, m.dFf = p->dFf, m.seqLen = p->seqLen, m.positions = p->positions;
    m.ropeTheta = p->ropeTheta, m.tieEmbeddings = p->tieEmbeddings;
  } else if (m.kind == "gpt2") {
    m.tieEmbeddings = true;
  }
  m.vocabSize = static_cast<int>(r.integer("vocab_size", m.vocabSize, 2, 1 << 20));
  m.dModel = static_cast<int>(r.integer("d_model", m.dModel, 1, 1 << 16));
  m.heads = static_cast<int>(r.integer("heads", m.heads, 1, 1024));
  m.layers = static_cast<int>(r.integer("layers", m.layers, 1, 4096));
  m.dFf = static_cast<int>(r.integer("d_ff", m.dFf, 1, 1 << 18));
  m.seqLen = static_cast<int>(r.integer("seq_len", m.seqLen, 1, 1 << 16));
  m.dropout = r.number("dropout", m.dropout, 0.0, 0.99);
  if (m.dModel % m.heads != 0) {
    throw SpecError(r.pathOf("heads"), "d_model " + std::to_string(m.dModel) + " is not divisible by heads " +
                                           std::to_string(m.heads));
  }
  if (m.kind == "llama") {
    m.kvHeads = static_cast<int>(r.integer("kv_heads", m.kvHeads > 0 ? m.kvHeads : m.heads, 1, m.heads));
    if (m.heads % m.kvHeads != 0) {
      throw SpecError(r.pathOf("kv_heads"), "heads " + std::to_string(m.heads) + " is not a multiple of kv_heads " +
                                                std::to_string(m.kvHeads));
    }
    if ((m.dModel / m.heads) % 2 != 0) {
      throw SpecError(r.pathOf("heads"), "the head width d_model/heads = " + std::to_string(m.dModel / m.heads) +
                                             " is odd: rotary embeddings rotate pairs");
    }
    m.ropeTheta = r.number("rope_theta", m.ropeTheta, 1.0, 1e12);
    m.normEps = r.number("norm_eps", m.normEps, 1e-12, 0.1);
  }
  if (bert) {
    m.tieEmbeddings = m.kind == "encoder";  // the MLM decoder is the word embeddings
    m.typeVocab = static_cast<int>(r.integer("type_vocab", m.typeVocab, 1, 1024));
    m.normEps = r.number("norm_eps", m.normEps, 1e-14, 0.1);
  }
  if (m.kind == "gpt2" || m.kind == "llama" || bert) {
    m.positions = static_cast<int>(r.integer("positions", m.positions > 0 ? m.positions : m.seqLen, 1, 1 << 24));
    if (m.positions < m.seqLen) {
      throw SpecError(r.pathOf("seq_len"), "seq_len " + std::to_string(m.seqLen) + " exceeds the model's " +
                                               std::to_string(m.positions) + " positions");
    }
  }
  if (m.kind == "llama" || m.kind == "gpt2") m.tieEmbeddings = r.boolean("tie_embeddings", m.tieEmbeddings);
  if (const json* tied = m.kind == "torchscript" ? r.child("tied", false) : nullptr) {
    const std::string path = r.pathOf("tied");
    if (!tied->is_array() || tied->size() > 16) throw SpecError(path, "expected up to 16 pairs of parameter names");
    for (const auto& pair : *tied) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string() ||
          pair[0].get<std::string>().empty() || pair[1].get<std::string>().empty() ||
          pair[0].get<std::string>().size() > 256 || pair[1].get<std::string>().size() > 256) {
        throw SpecError(path, describe(pair) + " is not a pair of parameter names [first stage's, last stage's]");
      }
      m.tied.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
    }
  }
  m.initFrom = parseInitFrom(r);
  m.adapter = static_cast<int>(r.integer("adapter", m.adapter, 0, 1 << 16));
  if (m.kind == "translation") m.decoderLayers = static_cast<int>(r.integer("decoder_layers", m.layers, 1, 4096));
  m.trainable = r.strings("trainable", std::vector<std::string>{});
  if (m.trainable.size() > 1024) throw SpecError(r.pathOf("trainable"), "more than 1024 patterns");
  for (const auto& pattern : m.trainable) {
    if (pattern.empty() || pattern.size() > 256) throw SpecError(r.pathOf("trainable"), "patterns are 1..256 characters");
  }
  if (m.kind == "electra") {
    auto& g = m.generator;
    g.dModel = std::max(1, m.dModel / 2);
    g.heads = std::max(1, m.heads / 2);
    g.layers = m.layers;
    g.dFf = std::max(1, m.dFf / 2);
    if (const json* generator = r.child("generator", false)) {
      ObjectReader gr(*generator, r.pathOf("generator"));
      g.dModel = static_cast<int>(gr.integer("d_model", g.dModel, 1, 1 << 16));
      g.heads = static_cast<int>(gr.integer("heads", g.heads, 1, 1024));
      g.layers = static_cast<int>(gr.integer("layers", g.layers, 1, 4096));
      g.dFf = static_cast<int>(gr.integer("d_ff", g.dFf, 1, 1 << 18));
      gr.finish();
    }
    if (g.dModel % g.heads != 0) {
      throw SpecError(r.pathOf("generator"), "d_model " + std::to_string(g.dModel) + " is not divisible by heads " +
                                                 std::to_string(g.heads));
    }
  }
  if (m.kind == "classifier") {
    m.classes = r.strings("classes", std::nullopt);
    if (m.classes.size() < 2 || m.classes.size() > 1024) throw SpecError(r.pathOf("classes"), "expected 2..1024 labels");
    for (size_t i = 0; i < m.classes.size(); ++i) {
      const auto& c = m.classes[i];
      if (c.empty() || c.size() > 128 || c.find_first_of("\t\n") != std::string::npos) {
        throw SpecError(r.pathOf("classes"), "labels are 1..128 characters without tabs or newlines");
      }
      if (std::find(m.classes.begin(), m.classes.begin() + i, c) != m.classes.begin() + i) {
        throw SpecError(r.pathOf("classes"), "label \"" + c + "\" is listed twice");
      }
    }
  }
  if (m.kind == "electra" || m.kind == "encoder") m.maskRate = r.number("mask_rate", m.maskRate, 0.01, 0.9);
  if (const auto* split = r.child("split_point", false)) {
    m.splitPoint = parseSplitPoint(ObjectReader(*split, r.pathOf("split_point")), m);
  }
  if (m.kind == "llama" || bert) {  // these blocks have neither (stages/models/llama.h, bert.h)
    for (const char* field : {"adapter", "split_point", "dropout"}) {
      if (r.has(field)) {
        throw SpecError(r.pathOf(field), std::string("is not available for ") +
                                             (bert ? "the bert layout" : "model.kind \"llama\""));
      }
    }
  }
  r.finish();
  return m;
}

DataSpec parseData(ObjectReader r) {
  DataSpec d;
  d.files = r.strings("files", std::nullopt);
  if (d.files.empty()) throw SpecError(r.pathOf("files"), "needs at least one file");
  d.sentencepieceModel = r.string("sentencepiece_model", "");
  d.evalFiles = r.strings("eval_files", std::vector<std::string>{});
  if (d.evalFiles.size() > 1024) throw SpecError(r.pathOf("eval_files"), "more than 1024 files");
  d.validationFraction = r.number("validation_fraction", d.validationFraction, 1e-6, 0.5);
  r.finish();
  return d;
}

OptimizerSpec parseOptimizer(ObjectReader r) {
  OptimizerSpec o;
  const std::string kind = r.string("kind", "adamw");
  if (kind != "adamw") throw SpecError(r.pathOf("kind"), "unknown optimizer \"" + kind + "\" (valid: adamw)");
  o.lr = r.number("lr", o.lr, 0.0, 10.0);
  o.beta1 = r.number("beta1", o.beta1, 0.0, 0.999999);
  o.beta2 = r.number("beta2", o.beta2, 0.0, 0.999999);
  o.eps = r.number("eps", o.eps, 1e-12, 1.0);
  o.weightDecay = r.number("weight_decay", o.weightDecay, 0.0, 10.0);
  o.schedule = r.string("schedule", o.schedule);
  if (o.schedule != "constant" && o.schedule != "cosine" && o.schedule != "linear") {
    throw SpecError(r.pathOf("schedule"), "unknown schedule \"" + o.schedule + "\" (valid: constant, cosine, linear)");
  }
  o.warmupSteps = static_cast<int>(r.integer("warmup_steps", o.warmupSteps, 0, kBig));
  o.minLr = r.number("min_lr", o.minLr, 0.0, 10.0);
  if (o.minLr > o.lr) throw SpecError(r.pathOf("min_lr"), "is above lr");
  o.clipNorm = r.number("clip_norm", o.clipNorm, 0.0, 1e9);
  o.onNonfinite = r.string("on_nonfinite", o.onNonfinite);
  if (o.onNonfinite != "fail" && o.onNonfinite != "skip") {
    throw SpecError(r.pathOf("on_nonfinite"), "\"" + o.onNonfinite + "\" is not fail or skip");
  }
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
  const json* value = r.child(key, true);
  const std::string path = r.pathOf(key);
  if (!value->is_array() || value->empty() || value->size() > 8) {
    throw SpecError(path, "expected 1..8 dimensions of one sample's input, got " + describe(*value));
  }
  std::vector<int64_t> shape;
  int64_t elements = 1;
  for (const auto& d : *value) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > kMaxSampleElements) {
      throw SpecError(path, "dimensions must be integers in [1, " + std::to_string(kMaxSampleElements) + "], got " +
                                describe(*value));
    }
    shape.push_back(d.get<int64_t>());
    elements *= shape.back();
    if (elements > kMaxSampleElements) {
      throw SpecError(path, describe(*value) + " is over " + std::to_string(kMaxSampleElements) + " elements a sample");
    }
  }
  return shape;
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
  if (index > 0) s.inputShape = parseShape(r, "input_shape");
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

double learningRate(const OptimizerSpec& o, int64_t step, int64_t totalSteps) {
  if (step < o.warmupSteps) return o.lr * static_cast<double>(step + 1) / o.warmupSteps;
  if (o.schedule == "constant") return o.lr;
  const double span = static_cast<double>(std::max<int64_t>(1, totalSteps - 1 - o.warmupSteps));
  const double progress = std::min(1.0, static_cast<double>(step - o.warmupSteps) / span);
  const double shape = o.schedule == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return o.minLr + (o.lr - o.minLr) * shape;
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
  spec.model = parseModel(ObjectReader(*r.child("model", true), "$.model"));
  spec.data = parseData(ObjectReader(*r.child("data", true), "$.data"));
  if (const json* o = r.child("optimizer", false)) spec.optimizer = parseOptimizer(ObjectReader(*o, "$.optimizer"));
  if (const json* c = r.child("compression", false)) {
    spec.compression = parseCompression(ObjectReader(*c, "$.compression"));
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
  if ((spec.model.tieEmbeddings || !spec.model.tied.empty()) && spec.stages.size() > 1 && spec.update != "sync") {
    throw SpecError("$.update", "tied embeddings across stages sum their gradients every step: only \"sync\" "
                                "(or model.tie_embeddings false)");
  }
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
