// Typed control messages (daemon/protocol/messages.h): every field checked, the bad one
// named; what toJson writes parses back to the same request.
#include <catch2/catch.hpp>

#include <functional>
#include <map>

#include "daemon/protocol/control.h"
#include "daemon/protocol/spec/job_spec.h"
#include "daemon/protocol/json_reader.h"
#include "daemon/protocol/messages.h"
#include "scheduler/error.h"

using namespace skytrain::protocol;
using skytrain::SpecError;
using skytrain::WireError;
using nlohmann::json;

namespace {

std::string refusal(const json& message) {
  try {
    parseRequest(message);
  } catch (const WireError& e) {
    return e.what();
  }
  FAIL("accepted: " << message.dump());
  return "";
}

const std::string kJob = "0123456789abcdef";

}  // namespace

TEST_CASE("each request type parses and round-trips") {
  StageStart start;
  start.job = kJob;
  start.stage = 1;
  start.previous = "tcp://a:7101";
  StageReport report;
  report.job = kJob;
  report.kind = ReportKind::Step;
  report.step = 3;
  report.loss = 2.5;
  report.stepSeconds = 0.1;
  report.codeShares = {{1, 0.25}, {12, 0.001}};  // a model with learned codes before layers 1 and 12
  report.senderLosses = {{12, 2.75}};             // and a sender's own loss at the second
  StoreRequest store;
  store.job = kJob;
  store.stage = 1;
  store.replica = 2;
  store.attempt = 3;
  store.op = "set";
  store.keys = {"rank0"};
  store.value = std::string("\x00\x01gloo", 6);
  StagePrepare prepare;
  prepare.job = kJob;
  prepare.stage = 1;
  prepare.spec = "{}";
  prepare.coordinator = "tcp://a:7100";
  prepare.inputShape = {16, 32};  // inferred from stage 0's output
  StageStart replicated = start;
  replicated.replica = 1;
  replicated.groupAttempt = 0;
  StagePrepare healed = prepare;  // a healing job's: from memory, on pipelines 0 and 2
  healed.resumeStep = 41;
  healed.resumeFrom = "memory";
  healed.pipelines = {0, 2};
  ReportKind readyKind = ReportKind::Ready;
  StageReport ready = report;
  ready.kind = readyKind;
  ready.loss.reset();
  const Request requests[] = {Ping{}, List{}, Submit{"{}", true}, Status{kJob, 4}, Cancel{kJob}, start,
                              StageAbort{{kJob, 2}}, StagePlan{{kJob, 0}, {4, "1f1b", {1, 2}}}, StagePlan{{kJob, 1}, {2, "gpipe", {}, {"ef(int8)"}, {"fp16"}}}, StageHeartbeat{{kJob, 1}}, Resume{kJob},
                              StageProfile{{kJob, 0}, 10}, report, store, replicated, prepare, healed, ready,
                              StageCommit{{kJob, 1, 2}, 41}};
  for (const auto& request : requests) {
    const json wire = toJson(request);
    INFO(wire.dump());
    const Envelope back = parseRequest(wire);
    CHECK(toJson(back.request) == wire);
  }
  const Envelope withId = parseRequest(json{{"type", "ping"}, {"id", 9}});
  CHECK(withId.id == 9u);
}

TEST_CASE("a healing job's prepare and commit are bounded") {
  const json prepare = {{"type", "stage.prepare"}, {"job", kJob}, {"stage", 0}, {"spec", "{}"},
                        {"coordinator", "tcp://a:7100"}, {"resume_step", 3}};
  auto with = [&](json extra) {
    json m = prepare;
    m.update(extra);
    return m;
  };
  CHECK(std::get<StagePrepare>(parseRequest(with({{"pipelines", {0, 3}}})).request).pipelines == std::vector<int>{0, 3});
  CHECK_THAT(refusal(with({{"resume_from", "disk"}})), Catch::Contains("$.resume_from"));
  CHECK_THAT(refusal(with({{"resume_from", "memory"}, {"resume_step", -1}})), Catch::Contains("needs a resume_step"));
  CHECK_THAT(refusal(with({{"pipelines", {1, 0}}})), Catch::Contains("$.pipelines[1]") && Catch::Contains("ascending"));
  CHECK_THAT(refusal(with({{"pipelines", {0, 0}}})), Catch::Contains("$.pipelines[1]"));
  CHECK_THAT(refusal(with({{"pipelines", {-1}}})), Catch::Contains("$.pipelines[0]"));
  CHECK_THAT(refusal(with({{"pipelines", json::array()}})), Catch::Contains("$.pipelines"));
  CHECK_THAT(refusal(with({{"pipelines", std::vector<int>(300, 1)}})), Catch::Contains("1 to 256"));
  CHECK_THAT(refusal({{"type", "stage.commit"}, {"job", kJob}, {"stage", 0}}), Catch::Contains("$.step"));
  CHECK_THAT(refusal({{"type", "stage.commit"}, {"job", kJob}, {"stage", 0}, {"step", -1}}), Catch::Contains("$.step"));
}

TEST_CASE("a step report's values by cut are bounded: layers written plainly, values finite and not negative") {
  const json step = {{"type", "stage.report"}, {"job", kJob}, {"stage", 1}, {"kind", "step"}, {"step", 0}};
  for (const std::string name : {"code_share", "sender_loss"}) {
    INFO(name);
    const auto of = [&](const StageReport& r) { return name == "code_share" ? r.codeShares : r.senderLosses; };
    auto with = [&](json values) {
      json m = step;
      m[name] = std::move(values);
      return m;
    };
    CHECK(of(std::get<StageReport>(parseRequest(with({{"2", 0.5}, {"40", 0.0}})).request)) ==
          std::map<int, double>{{2, 0.5}, {40, 0.0}});
    CHECK(of(std::get<StageReport>(parseRequest(step).request)).empty());
    CHECK_THAT(refusal(with(json::array({0.5}))), Catch::Contains("$." + name) && Catch::Contains("object"));
    for (const char* key : {"0", "-1", "01", "+2", "2x", "", "99999999999999999999", "../x"}) {
      INFO(key);
      CHECK_THAT(refusal(with({{key, 0.5}})), Catch::Contains("$." + name) && Catch::Contains("not a layer"));
    }
    CHECK_THAT(refusal(with({{"2", -0.5}})), Catch::Contains("$." + name + ".2"));
    CHECK_THAT(refusal(with({{"2", "high"}})), Catch::Contains("$." + name + ".2"));
    CHECK_THAT(refusal(with({{"2", 1e300}})), Catch::Contains("$." + name + ".2"));
    json many = json::object();
    for (size_t i = 1; i <= kMaxReportCuts + 1; ++i) many[std::to_string(i)] = 0.1;
    CHECK_THAT(refusal(with(many)), Catch::Contains("more than"));
  }
}

TEST_CASE("bad requests are refused naming the field") {
  CHECK_THAT(refusal({{"type", "launch"}}), Catch::Contains("$.type") && Catch::Contains("unknown"));
  CHECK_THAT(refusal({{"id", 1}}), Catch::Contains("$.type: required"));
  CHECK_THAT(refusal({{"type", "status"}, {"job", "../../etc"}}), Catch::Contains("$.job") && Catch::Contains("not a job id"));
  CHECK_THAT(refusal({{"type", "status"}, {"job", kJob}, {"since", -1}}), Catch::Contains("$.since"));
  CHECK_THAT(refusal({{"type", "ping"}, {"id", "x"}}), Catch::Contains("$.id"));
  CHECK_THAT(refusal({{"type", "ping"}, {"extra", 1}}), Catch::Contains("$.extra: unknown field"));
  CHECK_THAT(refusal({{"type", "stage.abort"}, {"job", kJob}, {"stage", 64}}), Catch::Contains("$.stage"));
  CHECK_THAT(refusal({{"type", "stage.start"}, {"job", kJob}, {"stage", 0}, {"previous", "http://x"}, {"next", ""}}),
             Catch::Contains("$.previous"));
  CHECK_THAT(refusal({{"type", "stage.start"}, {"job", kJob}, {"stage", 0}, {"previous", ""}, {"next", ""},
                      {"next_key", "short"}}),
             Catch::Contains("$.next_key"));
  CHECK_THAT(refusal({{"type", "stage.plan"}, {"job", kJob}, {"stage", 0}, {"micro_batches", 2}, {"schedule", "1f1b"},
                      {"warmups", {1, -1}}}),
             Catch::Contains("$.warmups[1]"));
  CHECK_THAT(refusal({{"type", "stage.report"}, {"job", kJob}, {"stage", 0}, {"kind", "eval"}}),
             Catch::Contains("$.loss"));
  CHECK_THAT(refusal({{"type", "stage.report"}, {"job", kJob}, {"stage", 0}, {"kind", "pwned"}}),
             Catch::Contains("$.kind"));
  CHECK_THAT(refusal({{"type", "stage.report"}, {"job", kJob}, {"stage", 0}, {"kind", "failed"},
                      {"error", std::string(5000, 'e')}}),
             Catch::Contains("$.error") && Catch::Contains("limit is 4096"));
  CHECK_THAT(refusal({{"type", "stage.report"}, {"job", kJob}, {"stage", 0}, {"kind", "step"}, {"step_s", -1.0}}),
             Catch::Contains("$.step_s"));
  // An inferred input_shape is bounded as the spec's own is, before anything is allocated.
  const json prepare = {{"type", "stage.prepare"}, {"job", kJob}, {"stage", 1}, {"spec", "{}"},
                        {"coordinator", "tcp://a:7100"}};
  for (const json& shape : {json::array(), json{16, 0}, json{1 << 13, 1 << 13}, json{1, 1, 1, 1, 1, 1, 1, 1, 1},
                            json{16.5}, json("16x32"), json{-1}}) {
    json bad = prepare;
    bad["input_shape"] = shape;
    CHECK_THAT(refusal(bad), Catch::Contains("$.input_shape"));
  }
  CHECK(parseSampleShape(json{16, 32}, "x") == std::vector<int64_t>{16, 32});
}

TEST_CASE("rendezvous store requests are bounded") {
  const json ok = {{"type", "store"}, {"job", kJob}, {"stage", 0}, {"replica", 1}, {"attempt", 0}, {"op", "get"}, {"keys", {"k"}}};
  CHECK(std::get<StoreRequest>(parseRequest(ok).request).replica == 1);
  json bad = ok;
  bad["op"] = "flush";
  CHECK_THAT(refusal(bad), Catch::Contains("$.op"));
  bad = ok;
  bad["keys"] = {"a", "b"};
  CHECK_THAT(refusal(bad), Catch::Contains("$.keys") && Catch::Contains("one key"));
  bad = ok;
  bad["keys"] = {std::string(513, 'k')};
  CHECK_THAT(refusal(bad), Catch::Contains("$.keys"));
  bad = ok;
  bad["replica"] = 256;
  CHECK_THAT(refusal(bad), Catch::Contains("$.replica"));
  bad = ok;
  bad["op"] = "set";
  bad["value"] = std::string(90000, 'A');
  CHECK_THAT(refusal(bad), Catch::Contains("$.value"));
  bad["value"] = "not base64!";
  CHECK_THAT(refusal(bad), Catch::Contains("$.value"));
}

TEST_CASE("raw bytes: size, depth and duplicate keys are bounded") {
  const std::string dup = R"({"type": "ping", "type": "list"})";
  CHECK_THROWS_WITH(parseRequest(dup.data(), dup.size()), Catch::Contains("$.type: duplicate key"));
  const std::string nested = R"({"type": "stage.report", "job": "0123456789abcdef", "stage": 0, "kind": "profile", "profile": {"a": {"b": {"a": 1, "a": 2}}}})";
  CHECK_THROWS_WITH(parseRequest(nested.data(), nested.size()), Catch::Contains("$.profile.a.b.a: duplicate key"));
  const std::string inArray = R"({"x": [1, {"k": 1}, {"k": 2, "k": 3}]})";
  CHECK_THROWS_WITH(parseBoundedJson(inArray, 1000, 8), Catch::Contains("$.x[2].k: duplicate key"));
  const std::string deep(100000, '[');
  CHECK_THROWS_WITH(parseRequest(deep.data(), deep.size()), Catch::Contains("nested deeper than"));
  const std::string big(kMaxControlMessageBytes + 1, ' ');
  CHECK_THROWS_WITH(parseRequest(big.data(), big.size()), Catch::Contains("the limit is 4194304"));
  // Found by fuzzing: a number beyond a double escaped as a nlohmann exception.
  const std::string huge = R"({"type": "status", "job": "0123456789abcdef", "since": 1e999})";
  CHECK_THROWS_AS(parseRequest(huge.data(), huge.size()), WireError);
  const std::string notObject = "[1, 2]";
  CHECK_THROWS_AS(parseRequest(notObject.data(), notObject.size()), WireError);
}

TEST_CASE("error text is valid UTF-8, even when a value is cut inside a character") {
  const std::string value = std::string(29, 'a') + std::string(15, '\0');
  std::string accented = std::string(29, 'a');
  for (int i = 0; i < 15; ++i) accented += "\xc3\xa9";
  const std::string text = describe(json(accented));
  CHECK(text.size() <= 60);
  CHECK(json(text).dump().size() > 0);  // throws on invalid UTF-8
  // Invalid UTF-8 in a message is replaced when it is written, never thrown.
  CHECK_NOTHROW(toText(json{{"error", std::string("bad \xc3")}}));
}

TEST_CASE("a prepare reply is checked field by field; a newer daemon's extra field is ignored") {
  StagePrepareReply reply;
  reply.dataEndpoint = "tcp://10.0.0.2:7101";
  reply.memory = "admission estimated 317.2 MB";
  reply.outputShape = {16, 32};
  const json wire = toJson(reply);
  const StagePrepareReply back = parsePrepareReply(wire);
  CHECK(back.dataEndpoint == reply.dataEndpoint);
  CHECK(back.memory == reply.memory);
  CHECK(back.outputShape == reply.outputShape);
  json newer = wire;
  newer["gpu_count"] = 8;
  CHECK(parsePrepareReply(newer).dataEndpoint == reply.dataEndpoint);
  json bare = wire;
  bare.erase("output_shape");
  bare.erase("memory");
  CHECK(parsePrepareReply(bare).outputShape.empty());

  auto refused = [&](const std::function<void(json&)>& edit) {
    json bad = wire;
    edit(bad);
    try {
      parsePrepareReply(bad);
    } catch (const WireError& e) {
      return std::string(e.what());
    }
    FAIL("accepted: " << bad.dump());
    return std::string();
  };
  CHECK_THAT(refused([](json& j) { j.erase("data_endpoint"); }), Catch::Contains("$.data_endpoint"));
  CHECK_THAT(refused([](json& j) { j["data_endpoint"] = "http://x"; }), Catch::Contains("$.data_endpoint"));
  CHECK_THAT(refused([](json& j) { j["data_endpoint"] = ""; }), Catch::Contains("$.data_endpoint"));
  CHECK_THAT(refused([](json& j) { j["data_endpoint"] = 7; }), Catch::Contains("$.data_endpoint"));
  CHECK_THAT(refused([](json& j) { j["memory"] = std::string(5000, 'm'); }), Catch::Contains("$.memory"));
  CHECK_THAT(refused([](json& j) { j["output_shape"] = {1 << 20, 1 << 20}; }), Catch::Contains("$.output_shape"));
  CHECK_THAT(refused([](json& j) { j["output_shape"] = "16x32"; }), Catch::Contains("$.output_shape"));
}
