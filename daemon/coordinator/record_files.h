// RecordFiles: where the coordinator keeps its job records on disk —
// <state_dir>/jobs/<id>/record.json (JobRecord::document) and metrics.jsonl (one step row
// a line) — written atomically or appended, and read back.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "daemon/coordinator/job_record.h"

namespace skytrain::daemon {

class RecordFiles {
 public:
  // Makes <stateDir>/jobs. Throws skytrain::Error naming it if it cannot.
  explicit RecordFiles(std::string stateDir);

  const std::string& stateDir() const { return stateDir_; }
  std::string jobDir(const std::string& id) const;
  // Every entry of <state_dir>/jobs, records or not.
  std::vector<std::string> entries() const;
  // The record in `dir` with its step rows; nullopt when it has no record.json. Throws on
  // one that cannot be parsed.
  std::optional<JobRecord> read(const std::string& dir) const;

  // Makes the job's directory and saves the record.
  void create(const JobRecord& r) const;
  // record.json, atomically.
  void save(const JobRecord& r) const;
  // Adds one step row to metrics.jsonl.
  void appendStep(const std::string& id, const Json& row) const;
  // metrics.jsonl as the record's step rows, atomically (after steps were forgotten).
  void rewriteSteps(const JobRecord& r) const;

 private:
  std::string stateDir_;
};

}  // namespace skytrain::daemon
