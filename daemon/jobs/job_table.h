// JobTable: the coordinator's records of the jobs submitted to this daemon (JobRecord),
// persisted under <state_dir>/jobs/<id>/ (RecordFiles). Shared by the control thread
// (requests, stage reports) and the coordinator threads, behind one mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/jobs/job_metrics.h"
#include "daemon/jobs/job_record.h"
#include "daemon/jobs/record_files.h"
#include "daemon/jobs/report_aggregator.h"
#include "daemon/protocol/spec/job_spec.h"
#include "daemon/protocol/messages.h"

namespace skytrain::daemon {

// Where a job's attempts stand, read in one locked copy (JobTable::progress).
struct JobProgress {
  int attempt = 0;      // the current attempt (0: the first)
  int restarts = 0;
  bool dryRun = false;
  int64_t lastCheckpoint = -1;  // the newest checkpoint every stage confirmed (-1: none)
  int64_t stepsDone = 0;        // complete step rows
  int microBatches = 0;         // m of the plan in force (a copy's share with every copy training); 0: none yet
  // Of the current attempt: a stage's reported failure, and the slots that reported done.
  std::optional<std::string> stageFailure;
  std::set<int> stagesDone;
  bool allStagesDone = false;
};

class JobTable {
 public:
  // selfKey: this daemon's public key ("" when insecure), which new jobs' ids are made from
  // (protocol/job_identity.h).
  JobTable(std::string stateDir, std::string selfKey);

  // Loads the records under state_dir; unreadable records are skipped (logged). Returns
  // the jobs that were not finished when the daemon stopped: their coordinators resume them.
  std::vector<std::string> load();

  // owner: the submitting key and its name; stageKeys: the public key of each stage's
  // daemon ("" when insecure), the only senders of that stage's reports.
  std::string create(const protocol::JobSpec& spec, const std::string& specText,
                     std::pair<std::string, std::string> owner, std::vector<std::string> stageKeys,
                     bool dryRun = false);
  // What a coordinator needs to take a job up again: its spec text and stage keys.
  std::pair<std::string, std::vector<std::string>> launchInfo(const std::string& id) const;

  // Throws skytrain::Error if the job is unknown.
  Json status(const std::string& id, size_t sinceStep) const;
  // Every job, or those of one owner key.
  Json list(const std::optional<std::string>& owner) const;
  JobState state(const std::string& id) const;
  JobProgress progress(const std::string& id) const;
  // The job's owner (key, name) and a stage daemon's key; throw skytrain::Error if unknown.
  std::pair<std::string, std::string> owner(const std::string& id) const;
  // The proof that this daemon made the job, sent with each stage.prepare ("" in older records).
  std::string proof(const std::string& id) const;
  // The key of the daemon hosting a copy of a stage (replica 0: the stage's own daemon).
  std::string stageKey(const std::string& id, int stage, int replica = 0) const;

  // Moves a job to `state` unless it is already terminal (then returns false).
  bool transition(const std::string& id, JobState state, const std::string& error = "");
  // A failed or cancelled job back to preparing (skytrain resume); false if it is not.
  bool reopen(const std::string& id, const std::string& why);

  // Attempts and restarts. beginAttempt forgets the reports of earlier attempts and the
  // steps after `fromStep` (they will be run again), and moves the job to running.
  // `pipelines`: those that train in it (a healing job's; empty: all).
  void beginAttempt(const std::string& id, int attempt, int64_t fromStep, std::vector<int> pipelines = {});
  // A healing job: whether every slot that trains awaits the commit of `step` (its
  // readiness is then forgotten).
  bool takeReady(const std::string& id, int64_t step);
  // Where export finds the final weights: the pipeline whose copies wrote them.
  void setWeightsPipeline(const std::string& id, int pipeline);
  // A healing job: the current attempt's rows complete with these pipelines' reports alone.
  void narrowPipelines(const std::string& id, std::vector<int> pipelines);
  void countRestart(const std::string& id);
  // Forgets a checkpoint that could not be restored.
  void dropCheckpoint(const std::string& id, int64_t step);
  // A line of the job's story (failures, restarts), shown by status and the progress stream.
  void addEvent(const std::string& id, const std::string& message);
  // An attempt's failure, with its reason (which names the stage and its daemon where one
  // failed): an event marked "failure" with the attempt, a warning in the log, counted in
  // skytrain_job_failures_total. Events outlive resume; the record's error does not.
  void addFailure(const std::string& id, int attempt, const std::string& why);
  // Applies a stage's report (step, eval, profile, done or failed); the caller has checked
  // who sent it.
  void applyReport(const protocol::StageReport& report);

  // Blocks until the job changes (a report, a transition) or timeout.
  void waitForChange(const std::string& id, std::chrono::milliseconds timeout);

  // Every stage's profile taken before `step`, once all have arrived (then forgotten).
  std::optional<std::vector<Json>> takeProfiles(const std::string& id, int64_t step);
  // Records the plan in force from `fromStep`, and why it was made.
  void setPlan(const std::string& id, Json plan, int64_t fromStep, const std::string& reason);
  // Step rows [from, end).
  std::vector<Json> steps(const std::string& id, size_t from) const;
  // The rendezvous store of a replicated stage's copies (daemon/net/replica_group.h) in the
  // current attempt: the reply to a store request whose sender the caller has checked.
  // Throws skytrain::WireError on a stale attempt or a full store.
  Json store(const protocol::StoreRequest& request);
  // Every job's figures for /metrics.
  std::vector<JobMetrics> metrics() const;

 private:
  JobRecord& find(const std::string& id);
  const JobRecord& find(const std::string& id) const;
  // Bumps the record's version and wakes waitForChange.
  void changed(JobRecord& r);

  RecordFiles files_;
  std::string selfKey_;
  ReportAggregator reports_{files_};
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, JobRecord> records_;
};

}  // namespace skytrain::daemon
