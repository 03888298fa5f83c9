// JobRecord: what the coordinator keeps of one job submitted to this daemon — its spec,
// state, owner, attempts, step rows, evals, plans and story — and the JSON views of it that
// status, list and record.json show.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/jobs/rendezvous_store.h"
#include "daemon/protocol/spec/job_spec.h"

namespace skytrain::daemon {

using Json = nlohmann::json;

enum class JobState { Preparing, Running, Succeeded, Failed, Cancelled };
inline constexpr JobState kJobStates[] = {JobState::Preparing, JobState::Running, JobState::Succeeded,
                                          JobState::Failed, JobState::Cancelled};
std::string toString(JobState state);
std::optional<JobState> parseJobState(const std::string& text);
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

// The stages' reports of the current attempt that are not folded into the record yet, per
// slot (job_spec.h: a stage's copy; slot i is stage i when there are no replicas). A new
// attempt starts them afresh.
struct AttemptReports {
  std::set<int> stagesDone;  // slots that reported done
  std::optional<std::string> stageFailure;
  std::map<int64_t, std::set<int>> confirmations;   // step -> slots that wrote its checkpoint
  std::map<int64_t, std::map<int, Json>> profiles;  // step -> slot -> profile
  std::map<int64_t, std::map<int, Json>> pending;   // step -> slot -> step report
  std::map<int64_t, std::set<int>> ready;           // a healing job: step -> slots that await its commit
  // The pipelines (replicas) that train in this attempt; empty: all. Steps, checkpoints and
  // the end count their slots only.
  std::vector<int> pipelines;
};


struct JobRecord {
  std::string id;
  std::string proof;  // that this daemon made the job (protocol/job_identity.h); "" in older records
  protocol::JobSpec spec;
  std::string specText;
  JobState state = JobState::Preparing;
  std::string error;
  std::string ownerKey, ownerName;
  std::vector<std::string> stageKeys;  // per slot
  double createdAt = 0;
  double finishedAt = 0;
  int attempt = 0;
  int restarts = 0;
  // The pipeline (replica) whose copies hold the final weights: the first that trained at
  // the end; not 0 only when a healing job's pipeline 0 left and did not rejoin.
  int weightsPipeline = 0;
  std::vector<int64_t> checkpoints;  // complete, oldest first
  double checkpointAt = 0;            // when the newest became complete
  std::vector<StageTotals> totals;    // per stage, over every attempt
  std::vector<Json> events;
  bool dryRun = false;
  uint64_t version = 0;     // bumped on every change, for JobTable::waitForChange
  std::vector<Json> plans;  // each with from_step and reason; the last is in force
  std::vector<Json> steps;
  std::vector<Json> evals;
  AttemptReports reports;
  RendezvousStore rendezvous;  // this attempt's

  // The fields of record.json (RecordFiles::save); its step rows are metrics.jsonl's.
  // Throws (nlohmann::json's errors, skytrain::Error) on a field that does not fit.
  static JobRecord fromDocument(const Json& doc);
  Json document() const;

  // The record's own fields, as record.json keeps them: steps are counted from 0 (the
  // index the engine samples by).
  Json header() const;
  // What list shows of the job, and what status adds to it: the step rows from sinceStep,
  // evals, summary, plans, events and where each stage's weights are. Every step here is
  // numbered from 1, as people read them ("step 20" is the 20th, and its checkpoint
  // step-00000020): the one numbering of every interface.
  Json listing() const;
  Json status(size_t sinceStep) const;
  // Final loss, throughput, bytes, and predicted against measured step time and bubble
  // under the plan in force; {} before the first step.
  Json summary() const;
};

// How many slots the pipelines that train in the current attempt have, and whether a slot
// is one of them.
int activeSlots(const JobRecord& r);
bool isActiveSlot(const JobRecord& r, int slot);

}  // namespace skytrain::daemon
