#include "daemon/protocol/messages.h"

#include <cmath>
#include <set>

#include "daemon/protocol/base64.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/job_identity.h"
#include "daemon/protocol/spec/job_spec.h"
#include "daemon/protocol/json_reader.h"
#include "daemon/protocol/keys.h"
#include "daemon/protocol/printable.h"
#include "scheduler/error.h"

namespace skytrain::protocol {
namespace {

using nlohmann::json;

constexpr int64_t kBig = int64_t{1} << 30;

std::string jobId(ObjectReader& r) {
  std::string id = r.string("job", std::nullopt);
  if (id.size() != 16 || id.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw SpecError(r.pathOf("job"), describe(json(id)) + " is not a job id (16 lowercase hex digits)");
  }
  return id;
}

void readRef(ObjectReader& r, StageRef& ref) {
  ref.job = jobId(r);
  ref.stage = static_cast<int>(r.integer("stage", std::nullopt, 0, 63));
  ref.replica = static_cast<int>(r.integer("replica", 0, 0, 255));
}

// A request that carries nothing but its job and stage.
template <typename T>
T refOnly(ObjectReader& r) {
  T m;
  readRef(r, m);
  return m;
}

std::string endpoint(ObjectReader& r, const std::string& key) {
  std::string value = r.boundedString(key, std::nullopt, kMaxEndpointLength);
  if (!value.empty() && value.rfind("tcp://", 0) != 0 && value.rfind("ipc://", 0) != 0) {
    throw SpecError(r.pathOf(key), describe(json(value)) + " is not a tcp:// or ipc:// endpoint");
  }
  return value;
}

std::string publicKey(ObjectReader& r, const std::string& key) {
  std::string value = r.string(key, "");
  if (!value.empty() && !isZ85Key(value)) throw SpecError(r.pathOf(key), "is not a 40-character Z85 public key");
  return value;
}

PlanMessage parsePlan(ObjectReader& r) {
  PlanMessage m;
  m.microBatches = static_cast<int>(r.integer("micro_batches", std::nullopt, 1, 1 << 20));
  m.schedule = r.boundedString("schedule", std::nullopt, 32);
  const json* warmups = r.child("warmups", false);
  if (warmups) {
    if (!warmups->is_array() || warmups->size() > 64) throw SpecError(r.pathOf("warmups"), "expected up to 64 integers");
    for (size_t i = 0; i < warmups->size(); ++i) {
      const json& w = (*warmups)[i];
      if (!w.is_number_integer() || w.get<int64_t>() < 0 || w.get<int64_t>() > (1 << 20)) {
        throw SpecError(r.pathOf("warmups") + "[" + std::to_string(i) + "]", "expected an integer in [0, 1048576]");
      }
      m.warmups.push_back(w.get<int>());
    }
  }
  for (auto [key, out] : {std::pair{"forward_codecs", &m.forwardCodecs}, std::pair{"backward_codecs", &m.backwardCodecs}}) {
    if (!r.has(key)) continue;
    *out = r.strings(key, std::nullopt);
    if (out->size() > 64) throw SpecError(r.pathOf(key), "expected at most 64 codec specs");
    for (const auto& c : *out) {
      if (c.size() > 128) throw SpecError(r.pathOf(key), "a codec spec is at most 128 characters");
    }
  }
  return m;
}

json planJson(const PlanMessage& m) {
  json j = {{"micro_batches", m.microBatches}, {"schedule", m.schedule}, {"warmups", m.warmups}};
  if (!m.forwardCodecs.empty()) j["forward_codecs"] = m.forwardCodecs;
  if (!m.backwardCodecs.empty()) j["backward_codecs"] = m.backwardCodecs;
  return j;
}

StoreRequest parseStore(ObjectReader& r) {
  StoreRequest m;
  readRef(r, m);
  m.attempt = static_cast<int>(r.integer("attempt", std::nullopt, 0, 1 << 20));
  m.op = r.boundedString("op", std::nullopt, 16);
  static const std::set<std::string> ops{"set", "get", "add", "check", "delete", "count"};
  if (!ops.count(m.op)) throw SpecError(r.pathOf("op"), describe(json(m.op)) + " is not one of set, get, add, check, delete, count");
  if (m.op != "count") {
    m.keys = r.strings("keys", std::nullopt);
    if (m.keys.empty() || m.keys.size() > (m.op == "check" ? kMaxStoreKeys : 1)) {
      throw SpecError(r.pathOf("keys"), m.op == "check" ? "expected 1.." + std::to_string(kMaxStoreKeys) + " keys" : "expected one key");
    }
    for (const auto& k : m.keys) {
      if (k.empty() || k.size() > kMaxStoreKeyBytes) {
        throw SpecError(r.pathOf("keys"), "a key must be 1.." + std::to_string(kMaxStoreKeyBytes) + " bytes");
      }
    }
  }
  if (m.op == "set") {
    const std::string text = r.boundedString("value", std::nullopt, kMaxStoreValueBytes / 3 * 4 + 4);
    try {
      m.value = base64Decode(text, kMaxStoreValueBytes);
    } catch (const Error& e) {
      throw SpecError(r.pathOf("value"), e.what());
    }
  }
  if (m.op == "add") m.delta = r.integer("delta", std::nullopt, -kBig, kBig);
  return m;
}

Request parseBody(const std::string& type, ObjectReader& r) {
  if (type == "ping") return Ping{};
  if (type == "list") return List{};
  if (type == "submit") {
    Submit m;
    m.spec = r.boundedString("spec", std::nullopt, kMaxSpecBytes);
    m.dryRun = r.boolean("dry_run", false);
    return m;
  }
  if (type == "status") {
    Status m;
    m.job = jobId(r);
    m.since = r.integer("since", 0, 0, kBig);
    return m;
  }
  if (type == "cancel") return Cancel{jobId(r)};
  if (type == "resume") return Resume{jobId(r)};
  if (type == "stage.heartbeat") {
    StageHeartbeat m;
    readRef(r, m);
    m.complete = r.integer("complete", -1, -1, kBig);
    return m;
  }
  if (type == "stage.prepare") {
    StagePrepare m;
    readRef(r, m);
    m.spec = r.boundedString("spec", std::nullopt, kMaxSpecBytes);
    m.coordinator = endpoint(r, "coordinator");
    if (m.coordinator.empty()) throw SpecError(r.pathOf("coordinator"), "must not be empty");
    m.owner = r.boundedString("owner", std::string(), 64);
    if (!m.owner.empty() && !isZ85Key(m.owner)) throw SpecError(r.pathOf("owner"), "is not a Z85 public key");
    m.proof = r.boundedString("proof", std::string(), kJobProofHexDigits);
    if (!m.proof.empty() && (m.proof.size() != kJobProofHexDigits ||
                             m.proof.find_first_not_of("0123456789abcdef") != std::string::npos)) {
      throw SpecError(r.pathOf("proof"), "is not " + std::to_string(kJobProofHexDigits) + " lowercase hex digits");
    }
    m.attempt = static_cast<int>(r.integer("attempt", 0, 0, 1 << 20));
    m.resumeStep = r.integer("resume_step", -1, -1, kBig);
    if (const json* shape = r.child("input_shape", false)) m.inputShape = parseSampleShape(*shape, r.pathOf("input_shape"));
    m.dryRun = r.boolean("dry_run", false);
    m.resumeFrom = r.boundedString("resume_from", std::string(), 16);
    if (m.resumeFrom != "" && m.resumeFrom != "memory" && m.resumeFrom != "peer") {
      throw SpecError(r.pathOf("resume_from"), describe(json(m.resumeFrom)) + " is not \"memory\" or \"peer\"");
    }
    if (!m.resumeFrom.empty() && m.resumeStep < 0) throw SpecError(r.pathOf("resume_from"), "needs a resume_step");
    if (const json* pipelines = r.child("pipelines", false)) {
      if (!pipelines->is_array() || pipelines->empty() || pipelines->size() > 256) {
        throw SpecError(r.pathOf("pipelines"), "expected an array of 1 to 256 replica indices");
      }
      for (size_t i = 0; i < pipelines->size(); ++i) {
        const json& p = (*pipelines)[i];
        if (!p.is_number_integer() || p.get<int64_t>() < 0 || p.get<int64_t>() > 255 ||
            (i > 0 && p.get<int64_t>() <= m.pipelines.back())) {
          throw SpecError(r.pathOf("pipelines") + "[" + std::to_string(i) + "]", "expected replica indices, ascending");
        }
        m.pipelines.push_back(static_cast<int>(p.get<int64_t>()));
      }
    }
    return m;
  }
  if (type == "stage.start") {
    StageStart m;
    readRef(r, m);
    m.previous = endpoint(r, "previous");
    m.next = endpoint(r, "next");
    m.previousKey = publicKey(r, "previous_key");
    m.nextKey = publicKey(r, "next_key");
    if (const json* producers = r.child("producers", false)) {
      if (!producers->is_array() || producers->size() > kMaxProducers) {
        throw SpecError(r.pathOf("producers"), "expected an array of at most " + std::to_string(kMaxProducers) + " producers");
      }
      for (size_t i = 0; i < producers->size(); ++i) {
        ObjectReader p((*producers)[i], r.pathOf("producers") + "[" + std::to_string(i) + "]");
        m.producers.push_back({endpoint(p, "endpoint"), publicKey(p, "key")});
        p.finish();
      }
    }
    m.groupAttempt = static_cast<int>(r.integer("group_attempt", -1, -1, 1 << 20));
    return m;
  }
  if (type == "stage.abort") return refOnly<StageAbort>(r);
  if (type == "stage.commit") {
    StageCommit m;
    readRef(r, m);
    m.step = r.integer("step", std::nullopt, 0, kBig);
    return m;
  }
  if (type == "stage.plan") {
    StagePlan m;
    readRef(r, m);
    static_cast<PlanMessage&>(m) = parsePlan(r);
    return m;
  }
  if (type == "stage.profile") {
    StageProfile m;
    readRef(r, m);
    m.atStep = r.integer("at_step", std::nullopt, -1, kBig);
    return m;
  }
  if (type == "stage.report") {
    StageReport m;
    readRef(r, m);
    readReportFields(r, m);
    return m;
  }
  if (type == "export") {
    ExportRead m;
    readRef(r, m);
    m.step = r.integer("step", -1, -1, kBig);
    m.offset = r.integer("offset", 0, 0, int64_t{1} << 50);
    return m;
  }
  if (type == "store") return parseStore(r);
  throw SpecError(r.pathOf("type"), describe(json(type)) +
                                        " is unknown (valid: ping, submit, status, list, cancel, resume, stage.prepare, "
                                        "stage.start, stage.abort, stage.plan, stage.profile, stage.heartbeat, "
                                        "stage.report, export, store, stage.commit)");
}

struct ToJson {
  json operator()(const Ping&) const { return {{"type", "ping"}}; }
  json operator()(const List&) const { return {{"type", "list"}}; }
  json operator()(const Submit& m) const { return {{"type", "submit"}, {"spec", m.spec}, {"dry_run", m.dryRun}}; }
  json operator()(const Status& m) const { return {{"type", "status"}, {"job", m.job}, {"since", m.since}}; }
  json operator()(const Cancel& m) const { return {{"type", "cancel"}, {"job", m.job}}; }
  json operator()(const Resume& m) const { return {{"type", "resume"}, {"job", m.job}}; }
  json operator()(const StageHeartbeat& m) const {
    // Only once there is one: a daemon of the version before reads a bare heartbeat.
    return ref("stage.heartbeat", m, m.complete >= 0 ? json{{"complete", m.complete}} : json::object());
  }
  json operator()(const StagePrepare& m) const {
    json j = ref("stage.prepare", m, {{"spec", m.spec}, {"coordinator", m.coordinator}, {"owner", m.owner}, {"proof", m.proof},
                                      {"attempt", m.attempt}, {"resume_step", m.resumeStep}});
    if (!m.inputShape.empty()) j["input_shape"] = m.inputShape;
    if (m.dryRun) j["dry_run"] = true;
    if (!m.resumeFrom.empty()) j["resume_from"] = m.resumeFrom;
    if (!m.pipelines.empty()) j["pipelines"] = m.pipelines;
    return j;
  }
  json operator()(const StageStart& m) const {
    json producers = json::array();
    for (const auto& p : m.producers) producers.push_back({{"endpoint", p.endpoint}, {"key", p.key}});
    json j = ref("stage.start", m, {{"producers", producers}, {"previous", m.previous}, {"next", m.next}, {"previous_key", m.previousKey},
                                    {"next_key", m.nextKey}});
    if (m.groupAttempt >= 0) j["group_attempt"] = m.groupAttempt;
    return j;
  }
  json operator()(const StoreRequest& m) const {
    json j = ref("store", m, {{"attempt", m.attempt}, {"op", m.op}});
    if (m.op != "count") j["keys"] = m.keys;
    if (m.op == "set") j["value"] = base64Encode(m.value);
    if (m.op == "add") j["delta"] = m.delta;
    return j;
  }
  json operator()(const ExportRead& m) const { return ref("export", m, {{"step", m.step}, {"offset", m.offset}}); }
  json operator()(const StageAbort& m) const { return ref("stage.abort", m, json::object()); }
  json operator()(const StageCommit& m) const { return ref("stage.commit", m, {{"step", m.step}}); }
  json operator()(const StagePlan& m) const { return ref("stage.plan", m, planJson(m)); }
  json operator()(const StageProfile& m) const { return ref("stage.profile", m, {{"at_step", m.atStep}}); }
  json operator()(const StageReport& m) const { return ref("stage.report", m, reportFields(m)); }

  static json ref(const char* type, const StageRef& ref, json fields) {
    fields["type"] = type;
    fields["job"] = ref.job;
    fields["stage"] = ref.stage;
    if (ref.replica > 0) fields["replica"] = ref.replica;
    return fields;
  }
};

}  // namespace

std::string toString(ReportKind kind) {
  switch (kind) {
    case ReportKind::Step: return "step";
    case ReportKind::Eval: return "eval";
    case ReportKind::Profile: return "profile";
    case ReportKind::Checkpoint: return "checkpoint";
    case ReportKind::Done: return "done";
    case ReportKind::Failed: return "failed";
    case ReportKind::Ready: return "ready";
  }
  return "unknown";
}

Envelope parseRequest(const json& message) {
  std::string type = "?";
  try {
    ObjectReader r(message, "$");
    type = r.string("type", std::nullopt);
    if (type.size() > 32) type = type.substr(0, 32);
    Envelope envelope;
    if (r.has("id")) envelope.id = static_cast<uint64_t>(r.integer("id", std::nullopt, 0, INT64_MAX));
    envelope.request = parseBody(type, r);
    r.finish();
    return envelope;
  } catch (const SpecError& e) {
    throw WireError(describe(json(type)) + " request refused: " + e.what());
  }
}

Envelope parseRequest(const void* data, size_t size) { return parseRequest(parseControlMessage(data, size)); }

json toJson(const Request& request) { return std::visit(ToJson{}, request); }

StagePrepareReply parsePrepareReply(const json& reply) {
  try {
    ObjectReader r(reply, "$");
    StagePrepareReply m;
    m.dataEndpoint = endpoint(r, "data_endpoint");
    if (m.dataEndpoint.empty()) throw SpecError(r.pathOf("data_endpoint"), "must not be empty");
    m.memory = printable(r.boundedString("memory", std::string(), kMaxMemoryTextLength), 1024);
    if (const json* shape = r.child("output_shape", false)) m.outputShape = parseSampleShape(*shape, r.pathOf("output_shape"));
    return m;  // no finish(): a newer daemon's fields are ignored
  } catch (const SpecError& e) {
    throw WireError(std::string("prepare reply refused: ") + e.what());
  }
}

json toJson(const StagePrepareReply& m) {
  json j = {{"ok", true}, {"data_endpoint", m.dataEndpoint}, {"memory", m.memory}};
  if (!m.outputShape.empty()) j["output_shape"] = m.outputShape;
  return j;
}

std::string typeName(const Request& request) { return toJson(request).value("type", "?"); }

}  // namespace skytrain::protocol
