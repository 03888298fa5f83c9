// The model part of a job spec (daemon/protocol/spec/model_spec_parser.h): presets, the
// families' own fields and refusals, and the stage layouts of the kinds not cut by layers
// (torchscript modules, a translation's encoder and decoder).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <functional>

#include "daemon/protocol/spec/job_spec.h"
#include "tests/daemon/spec_test_helpers.h"

using nlohmann::json;
using skytrain::protocol::parseJobSpec;
using skytrain::testing::refusal;
using skytrain::testing::validSpec;

TEST_CASE("llama and gpt2 specs: presets, the spec's own fields over them, and the family's refusals") {
  json spec = validSpec();
  spec["model"] = {{"kind", "llama"}, {"preset", "llama-7b"}, {"layers", 4}, {"seq_len", 256}};
  auto parsed = parseJobSpec(spec.dump());
  CHECK(parsed.model.dModel == 4096);
  CHECK(parsed.model.dFf == 11008);
  CHECK(parsed.model.kvHeads == 32);
  CHECK(parsed.model.vocabSize == 32000);
  CHECK(parsed.model.layers == 4);      // the spec's own
  CHECK(parsed.model.seqLen == 256);    // the spec's own
  CHECK(parsed.model.positions == 4096);  // the preset's context, for config.json
  CHECK_FALSE(parsed.model.tieEmbeddings);

  spec["model"] = {{"kind", "llama"}, {"preset", "llama-1b"}, {"layers", 4}, {"seq_len", 64}};
  parsed = parseJobSpec(spec.dump());
  CHECK(parsed.model.kvHeads == 8);
  CHECK(parsed.model.ropeTheta == 500000.0);
  CHECK(parsed.model.tieEmbeddings);

  spec["model"] = {{"kind", "gpt2"}, {"preset", "gpt2-medium"}, {"layers", 4}, {"seq_len", 128}};
  parsed = parseJobSpec(spec.dump());
  CHECK(parsed.model.dModel == 1024);
  CHECK(parsed.model.positions == 1024);
  CHECK(parsed.model.tieEmbeddings);  // GPT-2 ties by default
  spec["model"] = {{"kind", "gpt2"}, {"d_model", 32}, {"heads", 4}, {"layers", 4}, {"d_ff", 64}, {"seq_len", 16}};
  CHECK(parseJobSpec(spec.dump()).model.tieEmbeddings);
  CHECK(parseJobSpec(spec.dump()).model.positions == 16);

  auto refused = [&](const json& model, const std::string& path, const std::string& text) {
    json s = validSpec();
    s["model"] = model;
    const auto [where, what] = refusal(s);
    CHECK(where == path);
    CHECK_THAT(what, Catch::Contains(text));
  };
  refused({{"kind", "llama"}, {"preset", "gpt2-small"}, {"layers", 4}}, "$.model.preset",
          "not a preset of kind \"llama\" (valid: llama-tiny, llama-160m, llama-1b, llama-7b, llama-8b)");
  refused({{"kind", "gpt"}, {"preset", "gpt2-small"}}, "$.model.preset", "(valid: none)");
  refused({{"kind", "llama"}, {"d_model", 32}, {"heads", 4}, {"kv_heads", 3}, {"layers", 4}}, "$.model.kv_heads",
          "heads 4 is not a multiple of kv_heads 3");
  refused({{"kind", "llama"}, {"d_model", 12}, {"heads", 4}, {"layers", 4}}, "$.model.heads", "odd");
  refused({{"kind", "llama"}, {"d_model", 32}, {"heads", 4}, {"layers", 4}, {"adapter", 8}}, "$.model.adapter",
          "not available for model.kind \"llama\"");
  refused({{"kind", "gpt2"}, {"d_model", 32}, {"heads", 4}, {"layers", 4}, {"seq_len", 32}, {"positions", 16}},
          "$.model.seq_len", "exceeds the model's 16 positions");
  refused({{"kind", "gpt"}, {"tie_embeddings", true}}, "$.model.tie_embeddings", "unknown");

  // Tied embeddings across stages sum their gradients every step: the synchronous update only.
  spec = validSpec();
  spec["model"] = {{"kind", "llama"}, {"d_model", 32}, {"heads", 4}, {"layers", 4}, {"tie_embeddings", true}};
  spec["schedule"] = "1f1b";
  spec["update"] = "delayed";
  const auto [where, what] = refusal(spec);
  CHECK(where == "$.update");
  CHECK_THAT(what, Catch::Contains("tied embeddings"));
}

TEST_CASE("the bert layout of the encoder and classifier: its presets, eps and token types") {
  json spec = validSpec();
  spec["model"] = {{"kind", "encoder"}, {"layout", "bert"}, {"preset", "bert-base"}, {"layers", 4}, {"seq_len", 128}};
  auto parsed = parseJobSpec(spec.dump());
  CHECK(parsed.model.layout == "bert");
  CHECK(parsed.model.dModel == 768);
  CHECK(parsed.model.vocabSize == 30522);
  CHECK(parsed.model.positions == 512);
  CHECK(parsed.model.normEps == 1e-12);
  CHECK(parsed.model.typeVocab == 2);
  CHECK(parsed.model.tieEmbeddings);  // the MLM decoder is the word embeddings
  spec["model"] = {{"kind", "encoder"}, {"preset", "bert-base"}};
  const auto [where, what] = refusal(spec);
  CHECK(where == "$.model.preset");
  CHECK_THAT(what, Catch::Contains("not a preset of kind \"encoder\""));
  spec["model"] = {{"kind", "gpt"}, {"layout", "bert"}};
  CHECK(refusal(spec).first == "$.model.layout");
  spec["model"] = {{"kind", "encoder"}, {"layout", "roberta"}};
  CHECK_THAT(refusal(spec).second, Catch::Contains("unknown layout \"roberta\" (valid: gpt, bert)"));
}

TEST_CASE("recompute: none by default, block for the zoo's decoder blocks") {
  json spec = validSpec();
  CHECK(parseJobSpec(spec.dump()).model.recompute == "none");
  spec["model"]["recompute"] = "block";
  CHECK(parseJobSpec(spec.dump()).model.recompute == "block");
  spec["model"]["kind"] = "llama";
  CHECK(parseJobSpec(spec.dump()).model.recompute == "block");
  spec["model"]["recompute"] = "selective";
  CHECK(refusal(spec).first == "$.model.recompute");
  spec["model"]["recompute"] = "block";
  spec["model"]["kind"] = "encoder";
  spec["model"]["layout"] = "bert";
  const auto [path, message] = refusal(spec);
  CHECK(path == "$.model.recompute");
  CHECK_THAT(message, Catch::Contains("the bert layout"));
}

TEST_CASE("torchscript specs: a module per stage, input shapes after the first, no layer ranges") {
  json s = validSpec();
  s["model"] = {{"kind", "torchscript"}, {"vocab_size", 256}, {"seq_len", 16}, {"loss", "module"}};
  s["stages"] = {{{"daemon", "tcp://127.0.0.1:7100"}, {"module", "/m/a.pt"}},
                 {{"daemon", "tcp://127.0.0.1:7110"}, {"module", "/m/b.pt"}, {"input_shape", {16, 32}}}};
  const auto spec = parseJobSpec(s.dump());
  CHECK(spec.model.kind == "torchscript");
  CHECK(spec.model.loss == "module");
  CHECK(spec.stages[1].module == "/m/b.pt");
  CHECK(spec.stages[1].inputShape == std::vector<int64_t>{16, 32});
  json inferred = s;  // left out: the coordinator infers it from stage 0's output when preparing
  inferred["stages"][1].erase("input_shape");
  CHECK(parseJobSpec(inferred.dump()).stages[1].inputShape.empty());

  auto refused = [&](const std::function<void(json&)>& edit, const std::string& path, const std::string& words) {
    json bad = s;
    edit(bad);
    const auto [where, message] = refusal(bad);
    CHECK(where == path);
    CHECK(message.find(words) != std::string::npos);
  };
  refused([](json& j) { j["model"]["kind"] = "bert"; }, "$.model.kind", "valid: classifier, electra, encoder, gpt, gpt2, llama, torchscript, translation");
  refused([](json& j) { j["stages"][1].erase("module"); }, "$.stages[1].module", "missing");
  refused([](json& j) { j["stages"][0]["input_shape"] = {16}; }, "$.stages[0].input_shape", "token ids");
  refused([](json& j) { j["stages"][1]["layers"] = {0, 2}; }, "$.stages[1].layers", "TorchScript stage");
  refused([](json& j) { j["stages"][1]["input_shape"] = {16, 0}; }, "$.stages[1].input_shape", "[1, ");
  refused([](json& j) { j["stages"][1]["input_shape"] = {1 << 13, 1 << 13}; }, "$.stages[1].input_shape", "elements");
  refused([](json& j) { j["stages"][1]["input_shape"] = "16x32"; }, "$.stages[1].input_shape", "dimensions");
  refused([](json& j) { j["model"]["loss"] = "mse"; }, "$.model.loss", "unknown loss");

  json gpt = validSpec();
  gpt["stages"][1]["module"] = "/m/b.pt";
  CHECK(refusal(gpt).first == "$.stages[1].module");
  gpt = validSpec();
  gpt["model"]["loss"] = "module";
  CHECK(refusal(gpt).second.find("module needs kind torchscript") != std::string::npos);
}

TEST_CASE("translation specs: two stages, each with its own init_from; adapters and decoder layers") {
  json s = validSpec();
  s["model"] = {{"kind", "translation"}, {"vocab_size", 259}, {"seq_len", 16}, {"adapter", 8}, {"decoder_layers", 3},
                {"trainable", {"*adapter*"}}};
  s["stages"] = {{{"daemon", "tcp://127.0.0.1:7100"}, {"init_from", "/m/encoder.safetensors"}},
                 {{"daemon", "tcp://127.0.0.1:7110"}, {"init_from", {"/m/decoder.safetensors"}}}};
  const auto spec = parseJobSpec(s.dump());
  CHECK(spec.model.adapter == 8);
  CHECK(spec.model.decoderLayers == 3);
  CHECK(spec.stages[0].initFrom == std::vector<std::string>{"/m/encoder.safetensors"});
  CHECK(spec.stages[1].initFrom == std::vector<std::string>{"/m/decoder.safetensors"});

  json three = s;
  three["stages"].push_back(three["stages"][1]);
  CHECK(refusal(three).first == "$.stages");
  json ranged = s;
  ranged["stages"][0]["layers"] = {0, 2};
  CHECK(refusal(ranged).second.find("whole encoder or decoder") != std::string::npos);
  json badInit = s;
  badInit["stages"][1]["init_from"] = 7;
  CHECK(refusal(badInit).first == "$.stages[1].init_from");
  json badAdapter = s;
  badAdapter["model"]["adapter"] = -1;
  CHECK(refusal(badAdapter).first == "$.model.adapter");
}

TEST_CASE("subspace: a rank for the gpt decoders; what would leave the subspace is refused with the reason") {
  json spec = validSpec();
  spec["model"]["subspace"] = {{"rank", 8}};
  auto parsed = parseJobSpec(spec.dump());
  CHECK(parsed.model.subspace.rank == 8);
  CHECK(parsed.model.subspace.enabled());
  // Every stage reads the data then (each rebuilds the hidden state from the token ids).
  spec["stages"] = {{{"daemon", "tcp://127.0.0.1:7100"}, {"layers", {0, 1}}},
                    {{"daemon", "tcp://127.0.0.1:7110"}, {"layers", {1, 3}}},
                    {{"daemon", "tcp://127.0.0.1:7120"}, {"layers", {3, 4}}}};
  parsed = parseJobSpec(spec.dump());
  CHECK(skytrain::protocol::readsData(parsed, 1));
  spec["model"].erase("subspace");
  CHECK_FALSE(skytrain::protocol::readsData(parseJobSpec(spec.dump()), 1));
  CHECK_FALSE(parseJobSpec(validSpec().dump()).model.subspace.enabled());

  auto refused = [](const std::function<void(json&)>& edit) {
    json s = validSpec();
    s["model"]["subspace"] = {{"rank", 8}};
    edit(s);
    return refusal(s);
  };
  CHECK(refused([](json& s) { s["model"]["subspace"]["rank"] = 33; }).first == "$.model.subspace.rank");
  CHECK(refused([](json& s) { s["model"]["subspace"]["rank"] = 0; }).first == "$.model.subspace.rank");
  CHECK(refused([](json& s) { s["model"]["subspace"] = json::object(); }).first == "$.model.subspace.rank");
  CHECK(refused([](json& s) { s["model"]["subspace"]["rnak"] = 1; }).second.find("did you mean") != std::string::npos);
  CHECK(refused([](json& s) { s["model"]["kind"] = "encoder"; }).second.find("not \"encoder\"") != std::string::npos);
  CHECK(refused([](json& s) { s["model"]["split_point"] = {{"block", 1}}; }).second.find("split_point") != std::string::npos);
  CHECK(refused([](json& s) { s["model"]["adapter"] = 4; }).second.find("adapter") != std::string::npos);
  CHECK(refused([](json& s) { s["stages"][1]["init_from"] = "/tmp/w.safetensors"; }).first == "$.stages[1].init_from");
  CHECK(refused([](json& s) { s["stages"][1]["init_from"] = "/tmp/w.safetensors"; }).second.find("model.init_from") !=
        std::string::npos);
  json pretrained = validSpec();  // a pretrained model converted into the subspace form
  pretrained["model"]["subspace"] = {{"rank", 8}};
  pretrained["model"]["init_from"] = "/tmp/w.safetensors";
  CHECK(parseJobSpec(pretrained.dump()).model.initFrom.size() == 1);
  json tied = validSpec();  // gpt2 ties its head by default: a tied subspace model
  tied["model"]["kind"] = "gpt2";
  tied["model"]["subspace"] = {{"rank", 8}};
  CHECK(parseJobSpec(tied.dump()).model.tieEmbeddings);
  json untied = validSpec();
  untied["model"]["kind"] = "gpt2";
  untied["model"]["tie_embeddings"] = false;
  untied["model"]["subspace"] = {{"rank", 8}};
  CHECK(parseJobSpec(untied.dump()).model.subspace.rank == 8);
}

TEST_CASE("subspace method \"cut\": a learned code at each stage boundary, the cuts read from the stages") {
  json spec = validSpec();
  spec["model"]["subspace"] = {{"rank", 8}, {"method", "cut"}};
  spec["stages"] = {{{"daemon", "tcp://127.0.0.1:7100"}, {"layers", {0, 1}}},
                    {{"daemon", "tcp://127.0.0.1:7110"}, {"layers", {1, 3}}},
                    {{"daemon", "tcp://127.0.0.1:7120"}, {"layers", {3, 4}}}};
  const auto parsed = parseJobSpec(spec.dump());
  CHECK(parsed.model.subspace.atCuts());
  CHECK(parsed.model.subspace.cuts == std::vector<int>{1, 3});
  CHECK(skytrain::protocol::readsData(parsed, 1));  // the anchors read the token ids
  spec["model"]["subspace"].erase("method");
  CHECK_FALSE(parseJobSpec(spec.dump()).model.subspace.atCuts());
  CHECK(parseJobSpec(spec.dump()).model.subspace.cuts.empty());
  spec["model"]["subspace"]["method"] = "everywhere";
  CHECK(refusal(spec).first == "$.model.subspace.method");
  spec["model"]["subspace"]["method"] = 3;
  CHECK(refusal(spec).first == "$.model.subspace.method");
  spec["model"]["subspace"]["method"] = "cut";
  CHECK(parseJobSpec(spec.dump()).model.subspace.senderLoss == 0.0);
  spec["model"]["subspace"]["sender_loss"] = 0.5;  // each sender's own next-token loss, at weight 0.5
  CHECK(parseJobSpec(spec.dump()).model.subspace.senderLoss == 0.5);
  for (const json& bad : {json(-0.1), json(101), json("half"), json(nullptr)}) {
    INFO(bad.dump());
    spec["model"]["subspace"]["sender_loss"] = bad;
    CHECK(refusal(spec).first == "$.model.subspace.sender_loss");
  }
  spec["model"]["subspace"]["sender_loss"] = 0.5;
  spec["model"]["subspace"]["method"] = "shared";
  CHECK(refusal(spec).first == "$.model.subspace.sender_loss");
  CHECK(refusal(spec).second.find("method \"cut\"") != std::string::npos);
  spec["model"]["subspace"]["method"] = "cut";
  spec["model"]["split_point"] = {{"block", 1}};
  CHECK(refusal(spec).second.find("split_point") != std::string::npos);
}
