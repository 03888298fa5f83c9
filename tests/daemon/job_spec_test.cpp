#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "daemon/protocol/spec/job_spec.h"
#include "scheduler/error.h"
#include "tests/daemon/spec_test_helpers.h"

using nlohmann::json;
using skytrain::SpecError;
using skytrain::protocol::parseJobSpec;
using skytrain::testing::refusal;
using skytrain::testing::validSpec;

TEST_CASE("a valid spec parses with defaults filled in") {
  const auto spec = parseJobSpec(validSpec().dump());
  CHECK(spec.steps == 10);
  CHECK(spec.microBatches == 4);
  CHECK(spec.schedule == "gpipe");
  CHECK(spec.model.vocabSize == 256);
  CHECK(spec.optimizer.lr == Approx(3e-4));
  CHECK(spec.compression.forward == "none");
  REQUIRE(spec.stages.size() == 2);
  CHECK(spec.stages[1].firstLayer == 2);
  CHECK(spec.stages[1].lastLayer == 4);
}

TEST_CASE("bad specs are refused with the JSON path and the value") {
  json spec = validSpec();
  SECTION("unknown key") {
    spec["model"]["widht"] = 3;
    const auto [path, message] = refusal(spec);
    CHECK(path == "$.model.widht");
    CHECK_THAT(message, Catch::Contains("unknown field"));
  }
  SECTION("wrong type") {
    spec["steps"] = "ten";
    const auto [path, message] = refusal(spec);
    CHECK(path == "$.steps");
    CHECK_THAT(message, Catch::Contains("expected an integer") && Catch::Contains("\"ten\""));
  }
  SECTION("negative steps") {
    spec["steps"] = -5;
    const auto [path, message] = refusal(spec);
    CHECK(path == "$.steps");
    CHECK_THAT(message, Catch::Contains("-5") && Catch::Contains("out of range"));
  }
  SECTION("overlapping stages") {
    spec["stages"][1]["layers"] = {1, 4};
    const auto [path, message] = refusal(spec);
    CHECK(path == "$.stages[1].layers");
    CHECK_THAT(message, Catch::Contains("overlaps"));
  }
  SECTION("a gap between stages") {
    spec["stages"][1]["layers"] = {3, 4};
    const auto [path, message] = refusal(spec);
    CHECK(path == "$.stages[1].layers");
    CHECK_THAT(message, Catch::Contains("gap") && Catch::Contains("layers 2..2"));
  }
  SECTION("stages that stop short of the model's end") {
    spec["stages"][1]["layers"] = {2, 3};
    CHECK(refusal(spec).first == "$.stages");
  }
  SECTION("a range beyond the model") {
    spec["stages"][1]["layers"] = {2, 9};
    CHECK(refusal(spec).first == "$.stages[1].layers");
  }
  SECTION("layers that are not a pair") {
    spec["stages"][0]["layers"] = {0};
    CHECK(refusal(spec).first == "$.stages[0].layers");
  }
  SECTION("micro-batches that do not divide the batch") {
    spec["micro_batches"] = 3;
    CHECK(refusal(spec).first == "$.micro_batches");
  }
  SECTION("an unknown schedule") {
    spec["schedule"] = "zigzag";
    CHECK_THAT(refusal(spec).second, Catch::Contains("valid: gpipe, 1f1b, 1f1b-delay, zb-h1, auto"));
  }
  SECTION("micro-batches that are neither auto nor a count") {
    spec["micro_batches"] = "many";
    CHECK_THAT(refusal(spec).second, Catch::Contains("\"auto\" or an integer"));
  }
  SECTION("a daemon that is not an endpoint") {
    spec["stages"][0]["daemon"] = "localhost:7100";
    CHECK(refusal(spec).first == "$.stages[0].daemon");
  }
  SECTION("heads that do not divide d_model") {
    spec["model"]["heads"] = 5;
    CHECK(refusal(spec).first == "$.model.heads");
  }
  SECTION("a missing required field") {
    spec.erase("data");
    const auto [path, message] = refusal(spec);
    CHECK(path == "$.data");
    CHECK_THAT(message, Catch::Contains("missing"));
  }
  SECTION("a file name that is not a string") {
    spec["data"]["files"] = {"a.txt", 7};
    CHECK(refusal(spec).first == "$.data.files[1]");
  }
}

TEST_CASE("replicas and devices: copies per stage, slots numbered replica-major") {
  json spec = validSpec();
  spec["stages"][0]["device"] = "cuda:1";
  spec["stages"][0]["replicas"] = {{{"daemon", "tcp://10.0.0.2:7100"}, {"device", "cuda"}}};
  spec["stages"][1]["replicas"] = {{{"daemon", "tcp://10.0.0.3:7100"}}};
  spec["micro_batches"] = 2;
  const auto parsed = parseJobSpec(spec.dump());
  using namespace skytrain::protocol;
  CHECK(replicaCount(parsed) == 2);
  CHECK(slotCount(parsed) == 4);
  CHECK(placementOf(parsed, 0).device == "cuda:1");
  CHECK(placementOf(parsed, 2).daemon == "tcp://10.0.0.2:7100");
  CHECK(placementOf(parsed, 2).device == "cuda");
  CHECK(placementOf(parsed, 3).device == "cpu");
  CHECK(stageOfSlot(parsed, 3) == 1);
  CHECK(replicaOfSlot(parsed, 3) == 1);
  CHECK(describeSlot(parsed, 3) == "stage 1 replica 1");
  CHECK(describeSlot(parsed, 1) == "stage 1");
  CHECK(heals(parsed));  // replicated, sync update, no ZeRO-1: heals in place by default

  SECTION("a job heals in place unless failure.heal is false, or its update or sharding cannot") {
    json off = spec;
    off["failure"] = {{"heal", false}};
    CHECK_FALSE(heals(parseJobSpec(off.dump())));
    json delayed = spec;
    delayed["update"] = "delayed";
    delayed["schedule"] = "1f1b";
    CHECK_FALSE(heals(parseJobSpec(delayed.dump())));
    json zero = spec;
    zero["optimizer"] = {{"zero", 1}};
    CHECK_FALSE(heals(parseJobSpec(zero.dump())));
    CHECK_FALSE(heals(parseJobSpec(validSpec().dump())));  // one copy: nothing to heal with
    off["failure"] = {{"heal", "yes"}};
    CHECK(refusal(off).first == "$.failure.heal");
  }

  SECTION("every stage needs as many copies") {
    spec["stages"][1].erase("replicas");
    const auto [path, message] = refusal(spec);
    CHECK(path == "$.stages[1].replicas");
    CHECK_THAT(message, Catch::Contains("replica r of a stage feeds replica r"));
  }
  SECTION("a replica's share must split into the micro-batches") {
    spec["micro_batches"] = 8;
    const auto [path, message] = refusal(spec);
    CHECK(path == "$.micro_batches");
    CHECK_THAT(message, Catch::Contains("share"));
  }
  SECTION("the batch must split among the copies") {
    spec["batch_size"] = 9;
    spec["micro_batches"] = 1;
    CHECK(refusal(spec).first == "$.batch_size");
  }
  SECTION("a device is cpu, cuda or cuda:N") {
    spec["stages"][0]["device"] = "tpu";
    CHECK(refusal(spec).first == "$.stages[0].device");
    spec["stages"][0]["device"] = "cuda:64";
    CHECK(refusal(spec).first == "$.stages[0].device");
  }
  SECTION("a copy is {daemon, key, device}") {
    spec["stages"][1]["replicas"][0]["layers"] = {0, 2};
    CHECK(refusal(spec).first == "$.stages[1].replicas[0].layers");
    spec["stages"][1]["replicas"][0] = {{"daemon", "http://x"}};
    CHECK(refusal(spec).first == "$.stages[1].replicas[0].daemon");
  }
}

TEST_CASE("compression \"auto\": the planner picks from allowed, lossless-quality codecs by default") {
  json spec = validSpec();
  spec["compression"] = {{"forward", "auto"}, {"backward", "auto"}};
  const auto parsed = parseJobSpec(spec.dump());
  CHECK(parsed.compression.allowed == std::vector<std::string>{"none", "fp16", "bf16", "ef(int8)"});
  spec["compression"]["allowed"] = {"none", "int4+rot"};
  CHECK(parseJobSpec(spec.dump()).compression.allowed.size() == 2);
  SECTION("allowed holds codecs, not auto") {
    spec["compression"]["allowed"] = {"auto"};
    CHECK(refusal(spec).first == "$.compression.allowed[0]");
    spec["compression"]["allowed"] = json::array();
    CHECK(refusal(spec).first == "$.compression.allowed");
  }
  SECTION("a direction's own list replaces allowed for that direction only") {
    spec["compression"]["allowed_backward"] = {"q13", "ef(int8)"};
    const auto c = parseJobSpec(spec.dump()).compression;
    CHECK(c.allowedFor(true) == std::vector<std::string>{"none", "int4+rot"});
    CHECK(c.allowedFor(false) == std::vector<std::string>{"q13", "ef(int8)"});
    spec["compression"]["allowed_forward"] = {"fp16"};
    CHECK(parseJobSpec(spec.dump()).compression.allowedFor(true) == std::vector<std::string>{"fp16"});
    spec["compression"]["allowed_backward"] = {"q13", "auto"};
    CHECK(refusal(spec).first == "$.compression.allowed_backward[1]");
    spec["compression"]["allowed_backward"] = json::array();
    CHECK(refusal(spec).first == "$.compression.allowed_backward");
  }
  SECTION("the warm-up codec is fixed") {
    spec["compression"]["warmup"] = "auto";
    CHECK(refusal(spec).first == "$.compression.warmup");
  }
}

TEST_CASE("\"+pred\" is a 2-stage chain's forward codec only") {
  json spec = validSpec();
  spec["compression"] = {{"forward", "q13+pred"}, {"backward", "q13"}};
  CHECK(parseJobSpec(spec.dump()).compression.forward == "q13+pred");
  SECTION("not backward, not warm-up, not in auto's lists") {
    spec["compression"]["backward"] = "q13+pred";
    CHECK(refusal(spec).first == "$.compression.backward");
    spec["compression"]["backward"] = "q13";
    spec["compression"]["warmup"] = "q13+rot+pred";
    spec["compression"]["warmup_steps"] = 2;
    CHECK(refusal(spec).first == "$.compression.warmup");
    spec["compression"].erase("warmup");
    spec["compression"]["forward"] = "auto";
    spec["compression"]["allowed_forward"] = {"none", "q13+pred"};
    CHECK_THAT(refusal(spec).second, Catch::Contains("does not choose"));
  }
  SECTION("a middle stage holds no token IDs") {
    spec["stages"] = json::array({{{"daemon", "tcp://127.0.0.1:7100"}, {"layers", {0, 1}}},
                                  {{"daemon", "tcp://127.0.0.1:7110"}, {"layers", {1, 3}}},
                                  {{"daemon", "tcp://127.0.0.1:7120"}, {"layers", {3, 4}}}});
    const auto [path, message] = refusal(spec);
    CHECK(path == "$.compression.forward");
    CHECK_THAT(message, Catch::Contains("2-stage"));
  }
}

TEST_CASE("update: sync by default; delayed needs a 1F1B schedule") {
  json spec = validSpec();
  CHECK(parseJobSpec(spec.dump()).update == "sync");
  spec["update"] = "delayed";
  CHECK_THAT(refusal(spec).second, Catch::Contains("schedule gpipe cannot"));
  spec["schedule"] = "1f1b";
  CHECK(parseJobSpec(spec.dump()).update == "delayed");
  spec["schedule"] = "zb-h1";
  CHECK_THAT(refusal(spec).second, Catch::Contains("zb-h1 is not built"));
  spec["update"] = "sync";
  CHECK(parseJobSpec(spec.dump()).schedule == "zb-h1");
  spec["update"] = "delayed";
  spec["schedule"] = "auto";
  CHECK(parseJobSpec(spec.dump()).update == "delayed");
  spec["update"] = "async";
  const auto [path, message] = refusal(spec);
  CHECK(path == "$.update");
  CHECK_THAT(message, Catch::Contains("valid: sync, delayed"));
}

TEST_CASE("micro_batches and schedule default to auto") {
  json spec = validSpec();
  spec.erase("micro_batches");
  spec.erase("schedule");
  const auto parsed = parseJobSpec(spec.dump());
  CHECK(parsed.microBatches == 0);
  CHECK(parsed.schedule == "auto");
  spec["micro_batches"] = "auto";
  CHECK(parseJobSpec(spec.dump()).microBatches == 0);
}

TEST_CASE("malformed, oversized and deeply nested documents are refused") {
  CHECK_THROWS_AS(parseJobSpec("{\"steps\": "), SpecError);
  CHECK_THROWS_AS(parseJobSpec("[1, 2]"), SpecError);
  CHECK_THROWS_WITH(parseJobSpec(std::string(skytrain::protocol::kMaxSpecBytes + 1, ' ')), Catch::Contains("limit"));
  std::string deep = "{\"name\":" + std::string(100, '[') + std::string(100, ']') + "}";
  CHECK_THROWS_WITH(parseJobSpec(deep), Catch::Contains("nested deeper"));
}

TEST_CASE("data: plain text by default; pre-tokenised shards, blended by weight") {
  json spec = validSpec();
  CHECK(parseJobSpec(spec.dump()).data.format == "text");
  spec["data"] = {{"format", "tokens"}, {"dtype", "uint32"},
                  {"blend", json::array({{{"files", {"/d/web"}}, {"weight", 3}}, {{"files", {"/d/a.bin", "/d/b.bin"}}}})}};
  const auto parsed = parseJobSpec(spec.dump());
  CHECK(parsed.data.format == "tokens");
  CHECK(parsed.data.dtype == "uint32");
  REQUIRE(parsed.data.blend.size() == 2);
  CHECK(parsed.data.blend[0].weight == 3);
  CHECK(parsed.data.blend[1].weight == 1);
  CHECK(parsed.data.blend[1].files.size() == 2);
  CHECK(parsed.data.files.empty());
  SECTION("files and blend together") {
    spec["data"]["files"] = {"/d/x.bin"};
    CHECK(refusal(spec).first == "$.data.blend");
  }
  SECTION("a blend of text") {
    spec["data"]["format"] = "text";
    spec["data"].erase("dtype");
    CHECK(refusal(spec).first == "$.data.blend");
  }
  SECTION("a weight of zero") {
    spec["data"]["blend"][0]["weight"] = 0;
    CHECK(refusal(spec).first == "$.data.blend[0].weight");
  }
  SECTION("a source without files") {
    spec["data"]["blend"][1]["files"] = json::array();
    CHECK(refusal(spec).first == "$.data.blend[1].files");
  }
  SECTION("an unknown dtype or format") {
    spec["data"]["dtype"] = "float32";
    CHECK(refusal(spec).first == "$.data.dtype");
    spec["data"]["dtype"] = "uint16";
    spec["data"]["format"] = "parquet";
    CHECK(refusal(spec).first == "$.data.format");
  }
  SECTION("a kind that reads other data") {
    spec["model"]["kind"] = "classifier";
    spec["model"]["classes"] = {"a", "b"};
    CHECK(refusal(spec).first == "$.data.format");
  }
}

TEST_CASE("every job spec in deploy/jobs parses") {
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(SKYTRAIN_SOURCE_DIR) + "/deploy/jobs")) {
    if (entry.path().extension() != ".json") continue;
    CAPTURE(entry.path().string());
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    CHECK_NOTHROW(parseJobSpec(text.str()));
    ++seen;
  }
  CHECK(seen >= 4);
}
