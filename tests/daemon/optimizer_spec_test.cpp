// The "optimizer" section and the precision it trains under (daemon/protocol/spec/optimizer_spec.h):
// the LLM recipe's defaults, fp16's place and its loss scaling.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>

#include "daemon/protocol/spec/job_spec.h"
#include "tests/daemon/spec_test_helpers.h"

using nlohmann::json;
using skytrain::protocol::parseJobSpec;
using skytrain::testing::refusal;
using skytrain::testing::validSpec;

TEST_CASE("the recipe's defaults: clipping on, warm-up over 5% of the steps, the LLM no-decay rule") {
  json spec = validSpec();
  spec["steps"] = 1000;
  SECTION("no optimizer section") {
    spec.erase("optimizer");
    const auto o = parseJobSpec(spec.dump()).optimizer;
    CHECK(o.clipNorm == 1.0);
    CHECK(o.warmupSteps == 50);
    CHECK_FALSE(o.noDecay.has_value());
  }
  SECTION("a section that names none of them") {
    spec["optimizer"] = {{"lr", 1e-3}};
    const auto o = parseJobSpec(spec.dump()).optimizer;
    CHECK(o.clipNorm == 1.0);
    CHECK(o.warmupSteps == 50);
  }
  SECTION("warm-up at most 2000 steps, none under 20") {
    spec["steps"] = 1000000;
    CHECK(parseJobSpec(spec.dump()).optimizer.warmupSteps == 2000);
    spec["steps"] = 19;
    CHECK(parseJobSpec(spec.dump()).optimizer.warmupSteps == 0);
  }
  SECTION("each can be switched off or chosen") {
    spec["optimizer"] = {{"clip_norm", 0}, {"warmup_steps", 0}, {"no_decay", json::array()}};
    const auto o = parseJobSpec(spec.dump()).optimizer;
    CHECK(o.clipNorm == 0);
    CHECK(o.warmupSteps == 0);
    REQUIRE(o.noDecay.has_value());
    CHECK(o.noDecay->empty());
    spec["optimizer"]["no_decay"] = {"*.bias", "tok_emb.*"};
    CHECK(parseJobSpec(spec.dump()).optimizer.noDecay == std::vector<std::string>{"*.bias", "tok_emb.*"});
  }
  SECTION("zero: 0 by default, 1 shards AdamW state, nothing else; not with the delayed update") {
    CHECK(parseJobSpec(spec.dump()).optimizer.zero == 0);
    spec["optimizer"] = {{"zero", 1}};
    CHECK(parseJobSpec(spec.dump()).optimizer.zero == 1);
    spec["optimizer"]["zero"] = 2;
    CHECK(refusal(spec).first == "$.optimizer.zero");
    spec["optimizer"]["zero"] = 1;
    spec["update"] = "delayed";
    spec["schedule"] = "1f1b";
    const auto [path, message] = refusal(spec);
    CHECK(path == "$.optimizer.zero");
    CHECK_THAT(message, Catch::Contains("delayed update"));
  }
  SECTION("no_decay refused when not a list of strings, or too long") {
    spec["optimizer"] = {{"no_decay", "*.bias"}};
    CHECK(refusal(spec).first == "$.optimizer.no_decay");
    spec["optimizer"]["no_decay"] = {"*.bias", 3};
    CHECK(refusal(spec).first == "$.optimizer.no_decay[1]");
    spec["optimizer"]["no_decay"] = std::vector<std::string>(skytrain::protocol::kMaxNoDecayPatterns + 1, "*");
    CHECK(refusal(spec).first == "$.optimizer.no_decay");
  }
}

TEST_CASE("precision: fp32 by default; bf16 and fp16 links default to their codec; fp16 on CUDA, loss-scaled") {
  json spec = validSpec();
  CHECK(parseJobSpec(spec.dump()).precision == "fp32");
  spec["precision"] = "bf16";
  auto parsed = parseJobSpec(spec.dump());
  CHECK(parsed.precision == "bf16");
  CHECK(parsed.compression.forward == "bf16");
  CHECK(parsed.compression.backward == "bf16");
  spec["compression"] = {{"forward", "none"}};
  CHECK(parseJobSpec(spec.dump()).compression.forward == "none");
  CHECK_FALSE(parsed.optimizer.lossScale.dynamic);
  spec.erase("compression");
  spec["precision"] = "fp16";
  CHECK_THAT(refusal(spec).second, Catch::Contains("CUDA") && Catch::Contains("stage 0") && Catch::Contains("bf16"));
  for (auto& stage : spec["stages"]) stage["device"] = "cuda";
  parsed = parseJobSpec(spec.dump());
  CHECK(parsed.compression.forward == "fp16");
  CHECK(parsed.compression.backward == "fp16");
  CHECK(parsed.optimizer.lossScale.dynamic);  // on by default under fp16
  CHECK(parsed.optimizer.lossScale.init == 65536);
  CHECK(parsed.optimizer.lossScale.growthInterval == 2000);
  spec["stages"][1]["replicas"] = {{{"daemon", "tcp://10.0.0.9:7100"}}};  // a copy on its daemon's CPU
  spec["stages"][0]["replicas"] = {{{"daemon", "tcp://10.0.0.8:7100"}, {"device", "cuda"}}};
  CHECK_THAT(refusal(spec).second, Catch::Contains("stage 1") && Catch::Contains("cpu"));
  spec["stages"][0].erase("replicas");
  spec["stages"][1].erase("replicas");
  spec["optimizer"] = {{"loss_scale", "none"}};
  CHECK_FALSE(parseJobSpec(spec.dump()).optimizer.lossScale.dynamic);
  spec["update"] = "delayed";
  spec["schedule"] = "1f1b";
  spec["optimizer"] = {{"loss_scale", "dynamic"}};
  CHECK_THAT(refusal(spec).second, Catch::Contains("delayed update"));
  CHECK(refusal(spec).first == "$.optimizer.loss_scale");
  spec.erase("update");
  spec["precision"] = "int8";
  CHECK(refusal(spec).first == "$.precision");
}

TEST_CASE("optimizer.loss_scale: none, dynamic, or its initial power of two and growth interval") {
  json spec = validSpec();
  spec["optimizer"] = {{"loss_scale", {{"init", 1024}, {"growth_interval", 100}}}};
  const auto scale = parseJobSpec(spec.dump()).optimizer.lossScale;  // fp32 too: exact, so harmless
  CHECK(scale.dynamic);
  CHECK(scale.init == 1024);
  CHECK(scale.growthInterval == 100);
  for (const json& bad : {json(1000), json("static"), json({{"init", 3}}), json({{"init", 0.5}}),
                          json({{"init", std::ldexp(1.0, 128)}}), json({{"growth_interval", 0}}),
                          json({{"init", 1024}, {"factor", 2}})}) {
    CAPTURE(bad.dump());
    spec["optimizer"] = {{"loss_scale", bad}};
    CHECK_THAT(refusal(spec).first, Catch::StartsWith("$.optimizer.loss_scale"));
  }
}
