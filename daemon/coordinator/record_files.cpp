#include "daemon/coordinator/record_files.h"

#include <filesystem>
#include <fstream>

#include "daemon/ops/files.h"

namespace skytrain::daemon {
namespace {

// One JSON document a line, as metrics.jsonl holds step rows.
std::string line(const Json& row) { return row.dump(-1, ' ', false, Json::error_handler_t::replace); }

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

std::optional<JobRecord> RecordFiles::read(const std::string& dir) const {
  std::ifstream in(dir + "/record.json");
  if (!in) return std::nullopt;
  JobRecord r = JobRecord::fromDocument(Json::parse(in));
  std::ifstream metrics(dir + "/metrics.jsonl");
  for (std::string text; std::getline(metrics, text);) {
    if (!text.empty()) r.steps.push_back(Json::parse(text));
  }
  return r;
}

void RecordFiles::create(const JobRecord& r) const {
  makeDirectories(jobDir(r.id));
  save(r);
}

void RecordFiles::save(const JobRecord& r) const {
  writeFileAtomic(jobDir(r.id) + "/record.json", r.document().dump(2, ' ', false, Json::error_handler_t::replace));
}

void RecordFiles::appendStep(const std::string& id, const Json& row) const {
  appendLine(jobDir(id) + "/metrics.jsonl", line(row));
}

void RecordFiles::rewriteSteps(const JobRecord& r) const {
  std::string rows;
  for (const auto& row : r.steps) rows += line(row) + "\n";
  writeFileAtomic(jobDir(r.id) + "/metrics.jsonl", rows);
}

}  // namespace skytrain::daemon
