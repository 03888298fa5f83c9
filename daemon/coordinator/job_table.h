// JobTable: the coordinator's records of the jobs submitted to this daemon — state,
// per-step metrics aggregated over stages, validation losses — persisted under
// <state_dir>/jobs/<id>/ (record.json, metrics.jsonl). Shared by the control thread
// (requests, stage reports) and the coordinator threads, behind one mutex.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/protocol/job_spec.h"
#include "daemon/protocol/messages.h"

namespace skytrain::daemon {

using Json = nlohmann::json;

enum class JobState { Preparing, Running, Succeeded, Failed, Cancelled };
inline constexpr JobState kJobStates[] = {JobState::Preparing, JobState::Running, JobState::Succeeded,
                                          JobState::Failed, JobState::Cancelled};
std::string toString(JobState state);
bool isTerminal(JobState state);

// What one stage sent since the job was created, over every attempt (never decreases).
struct StageTotals {
  double bytesForward = 0, bytesBackward = 0;  // on the wire, to the next / previous stage
  double rawForward = 0, rawBackward = 0;      // the same tensors uncompressed
  double computeSeconds = 0;
};

// The idle share of the stages in one step row: 1 - mean(compute_s) / step_s (0 when the
// row has no step time).
double stepBubble(const Json& row);

// A job as /metrics shows it (coordinator/job_collector.h); unset: not measured yet.
struct JobMetrics {
  std::string id, name;
  JobState state = JobState::Preparing;
  int restarts = 0;
  std::optional<int64_t> step;  // the last complete step
  std::optional<double> trainLoss, validationLoss, tokensPerSecond, stepSeconds, predictedStepSeconds;
  std::optional<double> bubble, predictedBubble, checkpointAgeSeconds;
  std::vector<StageTotals> stages;
  std::vector<std::pair<double, double>> links;  // the plan's: bandwidth (bytes/s), round trip (s)
};

class JobTable {
 public:
  explicit JobTable(std::string stateDir);

  // Loads the records under state_dir; unreadable records are skipped (logged). Returns
  // the jobs that were not finished when the daemon stopped: their coordinators resume them.
  std::vector<std::string> load();

  // owner: the submitting key and its name; stageKeys: the public key of each stage's
  // daemon ("" when insecure), the only senders of that stage's reports.
  std::string create(const protocol::JobSpec& spec, const std::string& specText,
                     std::pair<std::string, std::string> owner, std::vector<std::string> stageKeys,
                     bool dryRun = false);
  std::string jobDir(const std::string& id) const;
  // What a coordinator needs to take a job up again: its spec text and stage keys.
  std::pair<std::string, std::vector<std::string>> launchInfo(const std::string& id) const;

  // Throws skytrain::Error if the job is unknown.
  Json status(const std::string& id, size_t sinceStep) const;
  // Every job, or those of one owner key.
  Json list(const std::optional<std::string>& owner) const;
  JobState state(const std::string& id) const;
  // The job's owner (key, name) and a stage daemon's key; throw skytrain::Error if unknown.
  std::pair<std::string, std::string> owner(const std::string& id) const;
  // The key of the daemon hosting a copy of a stage (replica 0: the stage's own daemon).
  std::string stageKey(const std::string& id, int stage, int replica = 0) const;

  // Moves a job to `state` unless it is already terminal (then returns false).
  bool transition(const std::string& id, JobState state, const std::string& error = "");
  // A failed or cancelled job back to preparing (skytrain resume); false if it is not.
  bool reopen(const std::string& id, const std::string& why);

  // Attempts and restarts. beginAttempt forgets the reports of earlier attempts and the
  // steps after `fromStep` (they will be run again), and moves the job to running.
  void beginAttempt(const std::string& id, int attempt, int64_t fromStep);
  int attempts(const std::string& id) const;
  int restarts(const std::string& id) const;
  void countRestart(const std::string& id);
  // A stage's reported failure in the current attempt.
  std::optional<std::string> stageFailure(const std::string& id) const;
  // The newest checkpoint every stage confirmed (-1: none); forgets a bad one.
  int64_t lastCheckpoint(const std::string& id) const;
  void dropCheckpoint(const std::string& id, int64_t step);
  // A line of the job's story (failures, restarts), shown by status and the progress stream.
  void addEvent(const std::string& id, const std::string& message);
  // Applies a stage's report (step, eval, profile, done or failed); the caller has checked
  // who sent it.
  void applyReport(const protocol::StageReport& report);

  // Blocks until the job changes (a report, a transition) or timeout.
  void waitForChange(const std::string& id, std::chrono::milliseconds timeout);
  bool allStagesDone(const std::string& id) const;
  std::set<int> doneStages(const std::string& id) const;  // of the current attempt
  bool dryRun(const std::string& id) const;

  // Every stage's profile taken before `step`, once all have arrived (then forgotten).
  std::optional<std::vector<Json>> takeProfiles(const std::string& id, int64_t step);
  // Records the plan in force from `fromStep`, and why it was made.
  void setPlan(const std::string& id, Json plan, int64_t fromStep, const std::string& reason);
  // Step rows [from, end).
  std::vector<Json> steps(const std::string& id, size_t from) const;
  // The rendezvous store of a replicated stage's copies (daemon/net/replica_group.h) in the
  // current attempt (job_attempts.cpp): the reply to a store request whose sender the
  // caller has checked. Throws skytrain::WireError on a stale attempt or a full store.
  Json store(const protocol::StoreRequest& request);
  // Every job's figures for /metrics (job_metrics.cpp).
  std::vector<JobMetrics> metrics() const;

 private:
  struct Record {
    std::string id;
    protocol::JobSpec spec;
    std::string specText;
    JobState state = JobState::Preparing;
    std::string error;
    std::string ownerKey, ownerName;
    std::vector<std::string> stageKeys;  // per slot
    double createdAt = 0;
    double finishedAt = 0;
    // Per slot (job_spec.h: a stage's copy; slot i is stage i when there are no replicas).
    std::set<int> stagesDone;  // slots that reported done
    int attempt = 0;
    int restarts = 0;
    std::optional<std::string> stageFailure;
    std::vector<int64_t> checkpoints;                 // complete, oldest first
    double checkpointAt = 0;                           // when the newest became complete
    std::vector<StageTotals> totals;                   // per stage, over every attempt
    std::map<int64_t, std::set<int>> confirmations;  // step -> slots that wrote it
    std::vector<Json> events;
    bool dryRun = false;
    uint64_t version = 0;  // bumped on every change, for waitForChange
    std::vector<Json> plans;  // each with from_step and reason; the last is in force
    std::map<int64_t, std::map<int, Json>> profiles;  // step -> slot -> profile
    std::vector<Json> steps;
    std::vector<Json> evals;
    std::map<int64_t, std::map<int, Json>> pending;  // step -> slot -> report
    std::map<int, std::map<std::string, std::string>> rendezvous;  // stage -> key -> value (this attempt)
  };

  Record& find(const std::string& id);
  const Record& find(const std::string& id) const;
  Json summary(const Record& r) const;
  Json header(const Record& r) const;
  void persist(const Record& r) const;
  void completeSteps(Record& r);
  void changed(Record& r);

  std::string stateDir_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Record> records_;
};

}  // namespace skytrain::daemon
