// How a job spec's "model" object is read: the kind, a preset and the sizes over it, the
// family's own fields and refusals (model_spec_parser.h).
#include "daemon/protocol/spec/model_spec_parser.h"

#include <algorithm>

#include "daemon/protocol/spec/model_presets.h"
#include "scheduler/error.h"

namespace skytrain::protocol {

using nlohmann::json;

namespace {

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

// model.subspace: {"rank": k, "method": "shared" | "cut", "sender_loss": W}, for the zoo's
// causal decoders; what the blocks it changes cannot also have is refused with the reason.
SubspaceSpec parseSubspace(ObjectReader r, const ModelSpec& m, const ObjectReader& model) {
  SubspaceSpec s;
  s.rank = static_cast<int>(r.integer("rank", std::nullopt, 1, m.dModel));
  s.method = r.string("method", s.method);
  s.senderLoss = r.number("sender_loss", s.senderLoss, 0.0, 100.0);
  r.finish();
  if (s.method != "shared" && s.method != "cut") {
    throw SpecError(model.pathOf("subspace") + ".method", "unknown method \"" + s.method + "\" (valid: shared, cut)");
  }
  if (s.senderLoss > 0 && s.method != "cut") {
    throw SpecError(model.pathOf("subspace") + ".sender_loss",
                    "is for method \"cut\": a shared subspace has no code to keep read");
  }
  const std::string path = model.pathOf("subspace");
  if (m.kind != "gpt" && m.kind != "gpt2" && m.kind != "llama") {
    throw SpecError(path, "is built for the causal decoders (gpt, gpt2, llama), not \"" + m.kind + "\"");
  }
  auto refuse = [&](const char* field, const std::string& why) {
    throw SpecError(path, std::string("cannot be combined with model.") + field + ": " + why);
  };
  if (m.splitPoint.block >= 0) refuse("split_point", "both decide what crosses a cut");
  if (m.adapter > 0) refuse("adapter", "an adapter's output would leave the subspace");
  return s;
}

}  // namespace

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

ModelSpec parseModelSpec(ObjectReader r) {
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
  m.recompute = r.string("recompute", m.recompute);
  if (m.recompute != "none" && m.recompute != "block") {
    throw SpecError(r.pathOf("recompute"), "unknown recompute \"" + m.recompute + "\" (valid: none, block)");
  }
  const bool zooBlocks = m.kind == "gpt" || m.kind == "gpt2" || m.kind == "llama" ||
                         ((m.kind == "encoder" || m.kind == "classifier") && !bert);
  if (m.recompute == "block" && !zooBlocks) {
    throw SpecError(r.pathOf("recompute"), "block recompute is built for the gpt, gpt2 and llama kinds (and the "
                                           "encoder and classifier with the gpt layout), not " +
                                               (bert ? std::string("the bert layout") : "kind \"" + m.kind + "\""));
  }
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
  if (const auto* subspace = r.child("subspace", false)) {
    m.subspace = parseSubspace(ObjectReader(*subspace, r.pathOf("subspace")), m, r);
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

}  // namespace skytrain::protocol
