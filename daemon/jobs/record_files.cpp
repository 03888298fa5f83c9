#include "daemon/jobs/record_files.h"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "daemon/ops/checkpoint_dirs.h"
#include "daemon/ops/files.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

// One JSON document a line, as metrics.jsonl holds step rows.
std::string line(const Json& row) { return row.dump(-1, ' ', false, Json::error_handler_t::replace); }

// XXH64 of a document's compact form (keys sorted, so the same after a parse), as hex.
std::string checksumOf(const Json& doc) {
  const std::string text = line(doc);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64(text.data(), text.size(), 0)));
  return hex;
}

std::string withChecksum(Json doc) {
  doc.erase("checksum");
  doc["checksum"] = checksumOf(doc);
  return doc.dump(2, ' ', false, Json::error_handler_t::replace);
}

// The document in `path` if it parses and its checksum matches (a record from before
// checksums, with none, is taken as it parses). Throws skytrain::Error saying what is wrong.
Json checkedDocument(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw Error("missing, or not a file");
  std::ifstream in(path);
  if (!in) throw Error("unreadable");
  Json doc = Json::parse(in, nullptr, false);
  if (!doc.is_object()) throw Error("not a JSON object (truncated or damaged)");
  if (doc.contains("checksum")) {
    const Json stored = doc["checksum"];
    doc.erase("checksum");
    if (!stored.is_string() || stored.get<std::string>() != checksumOf(doc)) throw Error("does not match its checksum");
  }
  return doc;
}

// A record from job.json: the job as submitted, unfinished (so its coordinator resumes it),
// with the checkpoints whose directories are on disk; its steps come from metrics.jsonl. A
// checkpoint some stage lacks is fallen back from as any damaged one.
JobRecord rebuilt(const std::string& dir) {
  JobRecord r = JobRecord::fromDocument(checkedDocument(dir + "/job.json"));
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir + "/checkpoints", ec)) {
    if (const int64_t step = checkpointStepOf(entry.path().string()); step >= 0) r.checkpoints.push_back(step);
  }
  std::sort(r.checkpoints.begin(), r.checkpoints.end());
  r.checkpoints.erase(std::unique(r.checkpoints.begin(), r.checkpoints.end()), r.checkpoints.end());
  return r;
}

}  // namespace

RecordFiles::RecordFiles(std::string stateDir) : stateDir_(std::move(stateDir)) {
  makeDirectories(stateDir_ + "/jobs");
}

std::string RecordFiles::jobDir(const std::string& id) const { return stateDir_ + "/jobs/" + id; }

std::vector<std::string> RecordFiles::entries() const {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(stateDir_ + "/jobs")) {
    out.push_back(entry.path().string());
  }
  return out;
}

std::optional<JobRecord> RecordFiles::read(const std::string& dir, std::string* recovered) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool any = fs::exists(dir + "/record.json", ec) || fs::exists(dir + "/record.prev.json", ec) ||
                   fs::exists(dir + "/job.json", ec);
  if (!any) return std::nullopt;
  std::string why;
  std::optional<JobRecord> r;
  for (const char* name : {"record.json", "record.prev.json"}) {
    try {
      r = JobRecord::fromDocument(checkedDocument(dir + "/" + name));
      break;
    } catch (const std::exception& e) {
      why += std::string(why.empty() ? "" : "; ") + name + ": " + e.what();
    }
  }
  std::string how = why.empty() ? "" : "restored from the previous generation (" + why + ")";
  const bool rebuiltFromSpec = !r;
  if (!r) {
    try {
      r = rebuilt(dir);
    } catch (const std::exception& e) {
      throw Error(why + "; job.json: " + e.what());
    }
    how = "rebuilt from job.json and the checkpoints on disk (" + why + ")";
  }
  if (recovered) *recovered = how;
  std::ifstream metrics;
  if (fs::is_regular_file(dir + "/metrics.jsonl", ec)) metrics.open(dir + "/metrics.jsonl");
  for (std::string text; metrics.is_open() && std::getline(metrics, text);) {
    // A row cut by a crash mid-append, or damaged since: skipped, the rest kept.
    if (auto row = Json::parse(text, nullptr, false); row.is_object()) r->steps.push_back(std::move(row));
  }
  if (rebuiltFromSpec) {
    // The attempt counter was in the lost record. <job>/attempt names the one that began
    // last; the step rows name those that ran steps and were kept. The next attempt goes
    // past both (and, should the file be lost too, past one that failed before its first
    // step), so frames and stage workers of an earlier attempt never pass for its own.
    constexpr int64_t kMaxAttempt = 1 << 19;
    int64_t highest = -1;
    for (const auto& row : r->steps) {
      if (const auto a = row.find("attempt"); a != row.end() && a->is_number_integer()) {
        highest = std::max(highest, std::clamp<int64_t>(a->get<int64_t>(), -1, kMaxAttempt));
      }
    }
    int64_t marked = -1;
    try {
      const std::string text = readFile(dir + "/attempt", 32);
      marked = std::clamp<int64_t>(std::stoll(text), -1, kMaxAttempt);
    } catch (const std::exception&) {  // missing or damaged: the rows alone
    }
    r->attempt = static_cast<int>(std::max(marked, highest + 1));
  }
  return r;
}

// A dry run (`skytrain plan`) is not a job: it lives in memory only, never on disk.
void RecordFiles::create(const JobRecord& r) const {
  if (r.dryRun) return;
  makeDirectories(jobDir(r.id));
  Json job = {{"id", r.id},           {"spec", r.specText},          {"state", toString(JobState::Preparing)},
              {"owner_key", r.ownerKey}, {"owner", r.ownerName},     {"stage_keys", r.stageKeys},
              {"proof", r.proof},     {"created_at", r.createdAt},   {"dry_run", r.dryRun}};
  writeFileAtomic(jobDir(r.id) + "/job.json", withChecksum(std::move(job)));
  writeRecord(r);
}

void RecordFiles::writeRecord(const JobRecord& r) const {
  const std::string path = jobDir(r.id) + "/record.json";
  // The generation before this one stays, should this one be damaged.
  if (::rename(path.c_str(), (jobDir(r.id) + "/record.prev.json").c_str()) != 0 && errno != ENOENT) {
    throw Error("cannot keep the previous generation of " + path + ": " + std::strerror(errno));
  }
  writeFileAtomic(path, withChecksum(r.document()));
}

void RecordFiles::save(const JobRecord& r) const {
  if (r.dryRun) return;
  try {
    writeRecord(r);
  } catch (const std::exception& e) {
    failures_.warn(r.id + ": " + e.what() + " (kept in memory; retried at its next change)");
    return;
  }
  if (stepsBehind_.count(r.id)) rewriteSteps(r);
}

void RecordFiles::markAttempt(const JobRecord& r) const {
  if (r.dryRun) return;
  try {
    writeFileAtomic(jobDir(r.id) + "/attempt", std::to_string(r.attempt) + "\n");
  } catch (const std::exception& e) {
    failures_.warn(r.id + ": " + e.what() + " (the attempt is in the record too)");
  }
}

void RecordFiles::appendStep(const JobRecord& r, const Json& row) const {
  if (r.dryRun) return;
  if (stepsBehind_.count(r.id)) return rewriteSteps(r);  // r.steps holds this row already
  try {
    appendLine(jobDir(r.id) + "/metrics.jsonl", line(row));
  } catch (const std::exception& e) {
    stepsBehind_.insert(r.id);
    failures_.warn(r.id + ": " + e.what() + " (the step rows are rewritten at the next save)");
  }
}

void RecordFiles::rewriteSteps(const JobRecord& r) const {
  if (r.dryRun) return;
  std::string rows;
  for (const auto& row : r.steps) rows += line(row) + "\n";
  try {
    writeFileAtomic(jobDir(r.id) + "/metrics.jsonl", rows);
    stepsBehind_.erase(r.id);
  } catch (const std::exception& e) {
    stepsBehind_.insert(r.id);
    failures_.warn(r.id + ": " + e.what() + " (the step rows are rewritten at the next save)");
  }
}

}  // namespace skytrain::daemon
