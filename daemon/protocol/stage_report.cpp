// The wire form of a stage report's own fields (StageReport, messages.h).
#include "daemon/protocol/messages.h"

#include <charconv>
#include <map>
#include <string>

#include "daemon/protocol/json_reader.h"
#include "scheduler/error.h"

namespace skytrain::protocol {
namespace {

using nlohmann::json;

constexpr int64_t kBig = int64_t{1} << 30;

double seconds(ObjectReader& r, const std::string& key) { return r.number(key, 0.0, 0.0, 1e9); }

// "code_share" or "sender_loss": {"<layer>": value}, each layer a positive integer written
// plainly, each value in [0, 1e9].
std::map<int, double> parseByLayer(ObjectReader& r, const std::string& name) {
  std::map<int, double> values;
  const json* value = r.child(name, false);
  if (!value) return values;
  ObjectReader reader(*value, r.pathOf(name));
  if (value->size() > kMaxReportCuts) {
    throw SpecError(reader.path(), "names more than " + std::to_string(kMaxReportCuts) + " cuts");
  }
  for (const auto& item : value->items()) {
    const std::string& key = item.key();
    int layer = 0;
    const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), layer);
    if (key.empty() || key[0] == '0' || key[0] == '-' || error != std::errc() || end != key.data() + key.size()) {
      throw SpecError(reader.path(), "has a key that is not a layer (a positive integer)");
    }
    values[layer] = reader.number(key, std::nullopt, 0.0, 1e9);
  }
  return values;
}

}  // namespace

void readReportFields(ObjectReader& r, StageReport& m) {
  m.attempt = static_cast<int>(r.integer("attempt", 0, 0, 1 << 20));
  const std::string kind = r.string("kind", std::nullopt);
  const ReportKind kinds[] = {ReportKind::Step, ReportKind::Eval, ReportKind::Profile, ReportKind::Checkpoint,
                              ReportKind::Done, ReportKind::Failed, ReportKind::Ready};
  bool known = false;
  for (ReportKind k : kinds) {
    if (toString(k) == kind) m.kind = k, known = true;
  }
  if (!known) throw SpecError(r.pathOf("kind"), describe(json(kind)) + " is unknown (valid: step, eval, profile, checkpoint, done, failed)");
  m.step = r.integer("step", 0, 0, kBig);
  if (const json* loss = r.child("loss", false); loss && !loss->is_null()) {
    m.loss = r.number("loss", std::nullopt, -1e30, 1e30);
  }
  if (const json* accuracy = r.child("accuracy", false); accuracy && !accuracy->is_null()) {
    m.accuracy = r.number("accuracy", std::nullopt, 0.0, 1.0);
  }
  if (const json* bleu = r.child("bleu", false); bleu && !bleu->is_null()) m.bleu = r.number("bleu", std::nullopt, 0.0, 100.0);
  m.stepSeconds = seconds(r, "step_s");
  m.computeSeconds = seconds(r, "compute_s");
  m.bytesSent = r.number("bytes_sent", 0.0, 0.0, 1e18);
  m.bytesRaw = r.number("bytes_raw", 0.0, 0.0, 1e18);
  m.bytesBackward = r.number("bytes_backward", 0.0, 0.0, m.bytesSent);
  m.rawBackward = r.number("raw_backward", 0.0, 0.0, m.bytesRaw);
  m.microBatches = static_cast<int>(r.integer("micro_batches", 0, 0, kBig));
  m.checkpointSeconds = seconds(r, "checkpoint_s");
  m.lr = r.number("lr", 0.0, 0.0, 10.0);
  m.skipped = r.boolean("skipped", false);
  m.lead = static_cast<int>(r.integer("lead", -1, -1, 1 << 20));
  m.codeShares = parseByLayer(r, "code_share");
  m.senderLosses = parseByLayer(r, "sender_loss");
  if (const json* profile = r.child("profile", m.kind == ReportKind::Profile)) {
    if (!profile->is_object()) throw SpecError(r.pathOf("profile"), "expected an object");
    m.profile = *profile;
  }
  m.error = r.boundedString("error", "", kMaxErrorLength);
  if (m.kind == ReportKind::Eval && !m.loss) {
    throw SpecError(r.pathOf("loss"), "an eval report needs a loss");
  }
}

json reportFields(const StageReport& m) {
  json j = {{"kind", toString(m.kind)}, {"step", m.step}, {"attempt", m.attempt}};
  if (m.kind == ReportKind::Step) {
    j.update({{"loss", m.loss ? json(*m.loss) : json(nullptr)}, {"step_s", m.stepSeconds},
              {"compute_s", m.computeSeconds}, {"bytes_sent", m.bytesSent}, {"bytes_raw", m.bytesRaw},
              {"bytes_backward", m.bytesBackward}, {"raw_backward", m.rawBackward},
              {"micro_batches", m.microBatches}, {"checkpoint_s", m.checkpointSeconds}, {"lr", m.lr},
              {"skipped", m.skipped}});
    if (m.lead >= 0) j["lead"] = m.lead;
    const auto byLayer = [&j](const char* name, const std::map<int, double>& values) {
      if (values.empty()) return;
      json object = json::object();
      for (const auto& [layer, value] : values) object[std::to_string(layer)] = value;
      j[name] = std::move(object);
    };
    byLayer("code_share", m.codeShares);
    byLayer("sender_loss", m.senderLosses);
  }
  if (m.kind == ReportKind::Eval && m.loss) j["loss"] = *m.loss;
  if (m.kind == ReportKind::Eval && m.accuracy) j["accuracy"] = *m.accuracy;
  if (m.kind == ReportKind::Eval && m.bleu) j["bleu"] = *m.bleu;
  if (m.kind == ReportKind::Profile) j["profile"] = m.profile;
  if (m.kind == ReportKind::Failed || (m.kind == ReportKind::Checkpoint && !m.error.empty())) j["error"] = m.error;
  return j;
}

}  // namespace skytrain::protocol
