// ReportAggregator: folds the stages' reports of a job's attempt into its record — a step
// row once every stage and replica has reported the step, evals, profiles, checkpoints every
// stage confirmed, done stages and failures.
#pragma once

#include "daemon/jobs/job_record.h"
#include "daemon/jobs/record_files.h"
#include "daemon/protocol/messages.h"

namespace skytrain::daemon {

class ReportAggregator {
 public:
  // Writes what a report completes (step rows, evals, checkpoints) through `files`, which
  // must outlive the aggregator.
  explicit ReportAggregator(const RecordFiles& files) : files_(files) {}

  // Applies a report whose sender the caller has checked. Returns false for a late report
  // of an earlier attempt (ignored); throws skytrain::WireError on one that names a stage,
  // replica or step the job does not have.
  bool apply(JobRecord& r, const protocol::StageReport& report) const;
  // A healing job's pipelines that go on: the current attempt's step rows complete with
  // their slots' reports alone (the step a heal resumes after may lack a lost copy's).
  void narrow(JobRecord& r, std::vector<int> pipelines) const;

 private:
  // Moves the pending step reports that complete a row, in step order, into the record.
  void completeSteps(JobRecord& r) const;
  void confirmCheckpoint(JobRecord& r, int64_t step, int slot) const;

  const RecordFiles& files_;
};

}  // namespace skytrain::daemon
