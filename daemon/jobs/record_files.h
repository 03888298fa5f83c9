// RecordFiles: where the coordinator keeps its job records on disk, under
// <state_dir>/jobs/<id>/, so that no damage to one file loses a job:
//   record.json       JobRecord::document with a "checksum" (XXH64 of the rest), atomically
//   record.prev.json  the generation before it (renamed aside at each save)
//   job.json          what the job was submitted as (spec, owner, stage keys), written once
//   metrics.jsonl     one step row a line, appended; a damaged line is skipped, not the job
// A record that is missing, truncated or fails its checksum is read from the previous
// generation, else rebuilt from job.json and the checkpoints in the job's directory.
// A write that fails (a full disk) is logged and made good at the job's next save: the
// record in memory stands meanwhile, so a full disk costs durability for a while, never the
// job or the daemon.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/jobs/job_record.h"
#include "daemon/ops/log_limiter.h"

namespace skytrain::daemon {

class RecordFiles {
 public:
  // Makes <stateDir>/jobs. Throws skytrain::Error naming it if it cannot.
  explicit RecordFiles(std::string stateDir);

  const std::string& stateDir() const { return stateDir_; }
  std::string jobDir(const std::string& id) const;
  // Every entry of <state_dir>/jobs, records or not.
  std::vector<std::string> entries() const;
  // The record in `dir` with its step rows; nullopt when the directory holds no job (none
  // of the three files). `recovered` says how, when record.json itself was not usable
  // ("" otherwise). Throws skytrain::Error when no file of the job can be read.
  std::optional<JobRecord> read(const std::string& dir, std::string* recovered = nullptr) const;

  // Makes the job's directory and writes job.json and the record. Throws skytrain::Error
  // naming the file when it cannot (the submit is refused with it).
  void create(const JobRecord& r) const;
  // record.json, atomically, and metrics.jsonl again if a step row was not written. Never
  // throws: a failure is logged and retried at the next save.
  void save(const JobRecord& r) const;
  // Adds one step row to metrics.jsonl; on failure the next save rewrites the file. Never throws.
  void appendStep(const JobRecord& r, const Json& row) const;
  // metrics.jsonl as the record's step rows, atomically (after steps were forgotten). Never throws.
  void rewriteSteps(const JobRecord& r) const;
  // <job>/attempt: the attempt that began last, apart from the record (a rebuilt record
  // resumes past it, though the step rows of attempts that failed are gone).
  void markAttempt(const JobRecord& r) const;

 private:
  void writeRecord(const JobRecord& r) const;

  std::string stateDir_;
  mutable std::set<std::string> stepsBehind_;  // jobs whose metrics.jsonl lacks rows (a failed write)
  mutable LogLimiter failures_{"jobs: a record write failed:"};
};

}  // namespace skytrain::daemon
