#include "daemon/protocol/spec/hf_layout.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

namespace skytrain::protocol {
namespace {

using nlohmann::json;

// One row of a family's table: "{i}" stands for a block's index on both sides.
struct Row {
  const char* skytrain;
  const char* hf;
  bool transposed = false;
};

const std::vector<Row>& llamaRows() {
  static const std::vector<Row> rows{
      {"tok_emb.weight", "model.embed_tokens.weight"},
      {"block{i}.attn_norm.weight", "model.layers.{i}.input_layernorm.weight"},
      {"block{i}.attn.q.weight", "model.layers.{i}.self_attn.q_proj.weight"},
      {"block{i}.attn.k.weight", "model.layers.{i}.self_attn.k_proj.weight"},
      {"block{i}.attn.v.weight", "model.layers.{i}.self_attn.v_proj.weight"},
      {"block{i}.attn.o.weight", "model.layers.{i}.self_attn.o_proj.weight"},
      {"block{i}.mlp_norm.weight", "model.layers.{i}.post_attention_layernorm.weight"},
      {"block{i}.mlp.gate.weight", "model.layers.{i}.mlp.gate_proj.weight"},
      {"block{i}.mlp.up.weight", "model.layers.{i}.mlp.up_proj.weight"},
      {"block{i}.mlp.down.weight", "model.layers.{i}.mlp.down_proj.weight"},
      {"norm.weight", "model.norm.weight"},
      {"head.weight", "lm_head.weight"},
  };
  return rows;
}

// GPT-2's names inside "transformer." (the head is outside it).
const std::vector<Row>& gpt2Rows() {
  static const std::vector<Row> rows{
      {"tok_emb.weight", "wte.weight"},
      {"pos_emb", "wpe.weight"},
      {"block{i}.ln1.weight", "h.{i}.ln_1.weight"},
      {"block{i}.ln1.bias", "h.{i}.ln_1.bias"},
      {"block{i}.attn.qkv.weight", "h.{i}.attn.c_attn.weight", true},
      {"block{i}.attn.qkv.bias", "h.{i}.attn.c_attn.bias"},
      {"block{i}.attn.proj.weight", "h.{i}.attn.c_proj.weight", true},
      {"block{i}.attn.proj.bias", "h.{i}.attn.c_proj.bias"},
      {"block{i}.ln2.weight", "h.{i}.ln_2.weight"},
      {"block{i}.ln2.bias", "h.{i}.ln_2.bias"},
      {"block{i}.fc.weight", "h.{i}.mlp.c_fc.weight", true},
      {"block{i}.fc.bias", "h.{i}.mlp.c_fc.bias"},
      {"block{i}.proj.weight", "h.{i}.mlp.c_proj.weight", true},
      {"block{i}.proj.bias", "h.{i}.mlp.c_proj.bias"},
      {"ln_f.weight", "ln_f.weight"},
      {"ln_f.bias", "ln_f.bias"},
  };
  return rows;
}

// BERT's names inside "bert." (BertModel's own files have none; the MLM head is outside it).
const std::vector<Row>& bertRows() {
  static const std::vector<Row> rows{
      {"tok_emb.weight", "embeddings.word_embeddings.weight"},
      {"pos_emb.weight", "embeddings.position_embeddings.weight"},
      {"type_emb.weight", "embeddings.token_type_embeddings.weight"},
      {"emb_ln.weight", "embeddings.LayerNorm.weight"},
      {"emb_ln.bias", "embeddings.LayerNorm.bias"},
      {"block{i}.attn.q.weight", "encoder.layer.{i}.attention.self.query.weight"},
      {"block{i}.attn.q.bias", "encoder.layer.{i}.attention.self.query.bias"},
      {"block{i}.attn.k.weight", "encoder.layer.{i}.attention.self.key.weight"},
      {"block{i}.attn.k.bias", "encoder.layer.{i}.attention.self.key.bias"},
      {"block{i}.attn.v.weight", "encoder.layer.{i}.attention.self.value.weight"},
      {"block{i}.attn.v.bias", "encoder.layer.{i}.attention.self.value.bias"},
      {"block{i}.attn.o.weight", "encoder.layer.{i}.attention.output.dense.weight"},
      {"block{i}.attn.o.bias", "encoder.layer.{i}.attention.output.dense.bias"},
      {"block{i}.ln1.weight", "encoder.layer.{i}.attention.output.LayerNorm.weight"},
      {"block{i}.ln1.bias", "encoder.layer.{i}.attention.output.LayerNorm.bias"},
      {"block{i}.fc.weight", "encoder.layer.{i}.intermediate.dense.weight"},
      {"block{i}.fc.bias", "encoder.layer.{i}.intermediate.dense.bias"},
      {"block{i}.proj.weight", "encoder.layer.{i}.output.dense.weight"},
      {"block{i}.proj.bias", "encoder.layer.{i}.output.dense.bias"},
      {"block{i}.ln2.weight", "encoder.layer.{i}.output.LayerNorm.weight"},
      {"block{i}.ln2.bias", "encoder.layer.{i}.output.LayerNorm.bias"},
  };
  return rows;
}

const std::vector<Row>& bertHeadRows() {
  static const std::vector<Row> rows{
      {"mlm.dense.weight", "cls.predictions.transform.dense.weight"},
      {"mlm.dense.bias", "cls.predictions.transform.dense.bias"},
      {"mlm.ln.weight", "cls.predictions.transform.LayerNorm.weight"},
      {"mlm.ln.bias", "cls.predictions.transform.LayerNorm.bias"},
      {"mlm.bias", "cls.predictions.bias"},
      {"classifier.weight", "classifier.weight"},
      {"classifier.bias", "classifier.bias"},
  };
  return rows;
}

// "llama", "gpt2", "bert" (the encoder and classifier in the bert layout), or "".
std::string family(const ModelSpec& m) {
  if (m.kind == "llama" || m.kind == "gpt2") return m.kind;
  if ((m.kind == "encoder" || m.kind == "classifier") && m.layout == "bert") return "bert";
  return "";
}

// The HF name of `name` under `row`, or nothing when the row does not match it.
std::optional<std::string> apply(const Row& row, const std::string& name) {
  const std::string from = row.skytrain, to = row.hf;
  const auto hole = from.find("{i}");
  if (hole == std::string::npos) return name == from ? std::optional<std::string>(to) : std::nullopt;
  const std::string head = from.substr(0, hole), tail = from.substr(hole + 3);
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0) {
    return std::nullopt;
  }
  const std::string index = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (index.empty() || index.size() > 6 || index.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  std::string out = to;
  out.replace(out.find("{i}"), 3, index);
  return out;
}

std::vector<HfName> lookup(const std::vector<Row>& rows, const std::string& name, const std::string& prefix) {
  for (const auto& row : rows) {
    if (auto hf = apply(row, name)) {
      if (prefix.empty()) return {{*hf, row.transposed}};
      return {{prefix + *hf, row.transposed}, {*hf, row.transposed}};
    }
  }
  return {};
}

std::string text(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// Compares config.json's fields with the spec's values, collecting mismatches.
class ConfigCheck {
 public:
  explicit ConfigCheck(const json& config) : config_(config) {}

  // The field's value, or `fallback` (HF's default) when absent or null.
  json field(const std::string& key, const json& fallback) const {
    const auto it = config_.find(key);
    return it == config_.end() || it->is_null() ? fallback : *it;
  }
  void equal(const std::string& key, const json& fallback, const json& spec, const std::string& specText = "") {
    const json value = field(key, fallback);
    const bool same = value.is_number() && spec.is_number()
                          ? std::abs(value.get<double>() - spec.get<double>()) <= 1e-9 * std::abs(spec.get<double>())
                          : value == spec;
    if (!same) add(key, value, specText.empty() ? text(spec) : specText);
  }
  void add(const std::string& key, const json& value, const std::string& spec) {
    problems.push_back(key + ": config.json has " + text(value) + ", the spec " + spec);
  }

  std::vector<std::string> problems;

 private:
  const json& config_;
};

}  // namespace

bool hasHfLayout(const ModelSpec& model) { return !family(model).empty(); }

std::vector<HfName> hfNames(const ModelSpec& model, const std::string& name) {
  if (family(model) == "bert") {
    if (name == "head.weight") return lookup(bertRows(), "tok_emb.weight", "bert.");
    auto head = lookup(bertHeadRows(), name, "");
    return head.empty() ? lookup(bertRows(), name, "bert.") : head;
  }
  if (model.kind == "llama") {
    if (name == "head.weight" && model.tieEmbeddings) return lookup(llamaRows(), "tok_emb.weight", "");
    return lookup(llamaRows(), name, "");
  }
  if (model.kind == "gpt2") {
    if (name == "head.weight") {
      return model.tieEmbeddings ? lookup(gpt2Rows(), "tok_emb.weight", "transformer.")
                                 : std::vector<HfName>{{"lm_head.weight", false}};
    }
    return lookup(gpt2Rows(), name, "transformer.");
  }
  return {};
}

bool hfExported(const ModelSpec& model, const std::string& name) {
  return !hfNames(model, name).empty() && !(name == "head.weight" && (model.tieEmbeddings || family(model) == "bert"));
}

std::vector<std::pair<std::string, std::string>> tiedCopies(const ModelSpec& model, size_t stages) {
  if (stages < 2) return {};
  if (model.kind == "torchscript") return model.tied;
  const bool tied = model.kind == "llama" || model.kind == "gpt2" ? model.tieEmbeddings
                                                                  : model.kind == "encoder" && model.layout == "bert";
  if (!tied) return {};
  return {{"tok_emb.weight", "head.weight"}};
}

std::vector<std::string> checkHfConfig(const ModelSpec& m, const json& config) {
  ConfigCheck c(config);
  if (!config.is_object()) return {"config.json is not a JSON object"};
  const std::string type = c.field("model_type", "").is_string() ? c.field("model_type", "").get<std::string>() : "";
  if (type != family(m)) {
    c.add("model_type", c.field("model_type", nullptr), "\"" + family(m) + "\" (model.kind" +
                                                            (family(m) == "bert" ? " and layout)" : ")"));
    return c.problems;
  }
  if (type == "bert") {
    c.equal("vocab_size", 30522, m.vocabSize);
    c.equal("hidden_size", 768, m.dModel);
    c.equal("num_hidden_layers", 12, m.layers);
    c.equal("num_attention_heads", 12, m.heads);
    c.equal("intermediate_size", 3072, m.dFf);
    c.equal("max_position_embeddings", 512, m.positions > 0 ? m.positions : m.seqLen);
    c.equal("type_vocab_size", 2, m.typeVocab);
    c.equal("layer_norm_eps", 1e-12, m.normEps);
    c.equal("hidden_act", "gelu", "gelu", "\"gelu\" (exact GELU)");
    c.equal("position_embedding_type", "absolute", "absolute", "\"absolute\" (a learned position table)");
  } else if (type == "llama") {
    c.equal("vocab_size", 32000, m.vocabSize);
    c.equal("hidden_size", 4096, m.dModel);
    c.equal("intermediate_size", 11008, m.dFf);
    c.equal("num_hidden_layers", 32, m.layers);
    c.equal("num_attention_heads", 32, m.heads);
    c.equal("num_key_value_heads", c.field("num_attention_heads", 32), m.kvHeads);
    c.equal("rope_theta", 10000.0, m.ropeTheta);
    c.equal("rms_norm_eps", 1e-6, m.normEps);
    // An untied shared-subspace model takes a tied checkpoint too: its head starts as the
    // embedding (a model with codes at its cuts keeps its blocks and head as they are).
    if (!m.subspace.enabled() || m.subspace.atCuts() || m.tieEmbeddings) c.equal("tie_word_embeddings", false, m.tieEmbeddings);
    c.equal("hidden_act", "silu", "silu", "\"silu\" (SwiGLU)");
    c.equal("attention_bias", false, false, "false (bias-free linears)");
    c.equal("mlp_bias", false, false, "false (bias-free linears)");
    c.equal("rope_scaling", nullptr, nullptr, "null (plain rotary embeddings)");
    if (m.heads > 0) c.equal("head_dim", m.dModel / m.heads, m.dModel / m.heads, std::to_string(m.dModel / m.heads) + " (d_model / heads)");
    c.equal("max_position_embeddings", 2048, m.positions > 0 ? m.positions : m.seqLen);
  } else {
    c.equal("vocab_size", 50257, m.vocabSize);
    c.equal("n_embd", 768, m.dModel);
    c.equal("n_layer", 12, m.layers);
    c.equal("n_head", 12, m.heads);
    c.equal("n_inner", 4 * c.field("n_embd", 768).get<int64_t>(), m.dFf);
    c.equal("n_positions", 1024, m.positions);
    c.equal("layer_norm_epsilon", 1e-5, 1e-5, "1e-05 (the zoo's LayerNorm)");
    const json act = c.field("activation_function", "gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh") c.add("activation_function", act, "\"gelu_new\" (GELU, tanh)");
    if (!m.subspace.enabled() || m.subspace.atCuts() || m.tieEmbeddings) c.equal("tie_word_embeddings", true, m.tieEmbeddings);
  }
  return c.problems;
}

json hfConfig(const ModelSpec& m, const std::string& torchDtype) {
  if (family(m) == "bert") {
    return {{"architectures", {m.kind == "classifier" ? "BertForSequenceClassification" : "BertForMaskedLM"}},
            {"model_type", "bert"},
            {"vocab_size", m.vocabSize},
            {"hidden_size", m.dModel},
            {"num_hidden_layers", m.layers},
            {"num_attention_heads", m.heads},
            {"intermediate_size", m.dFf},
            {"hidden_act", "gelu"},
            {"max_position_embeddings", m.positions > 0 ? m.positions : m.seqLen},
            {"type_vocab_size", m.typeVocab},
            {"layer_norm_eps", m.normEps},
            {"position_embedding_type", "absolute"},
            {"tie_word_embeddings", true},
            {"torch_dtype", torchDtype}};
  }
  if (m.kind == "llama") {
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"vocab_size", m.vocabSize},
            {"hidden_size", m.dModel},
            {"intermediate_size", m.dFf},
            {"num_hidden_layers", m.layers},
            {"num_attention_heads", m.heads},
            {"num_key_value_heads", m.kvHeads},
            {"head_dim", m.dModel / m.heads},
            {"max_position_embeddings", m.positions > 0 ? m.positions : m.seqLen},
            {"rms_norm_eps", m.normEps},
            {"rope_theta", m.ropeTheta},
            {"rope_scaling", nullptr},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"tie_word_embeddings", m.tieEmbeddings},
            {"torch_dtype", torchDtype}};
  }
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"vocab_size", m.vocabSize},
          {"n_embd", m.dModel},
          {"n_layer", m.layers},
          {"n_head", m.heads},
          {"n_inner", m.dFf},
          {"n_positions", m.positions},
          {"n_ctx", m.positions},
          {"layer_norm_epsilon", 1e-5},
          {"activation_function", "gelu_new"},
          {"tie_word_embeddings", m.tieEmbeddings},
          {"torch_dtype", torchDtype}};
}

}  // namespace skytrain::protocol
