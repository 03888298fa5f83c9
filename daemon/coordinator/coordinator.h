// Coordinator: the thread that drives one job submitted to this daemon — prepares and
// starts every stage on its daemon, plans from the stages' profiles (and plans again when
// measured step times drift from the prediction), waits for the end, aborts the stages on
// failure or cancel — while the control thread records the stages' reports in the JobTable.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/coordinator/job_table.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/job_spec.h"
#include "scheduler/planner.h"

namespace skytrain::daemon {

struct CoordinatorOptions {
  std::string selfControl;             // this daemon's control endpoint, for the stages' reports
  protocol::KeyPair self;              // this daemon's key pair (empty when insecure)
  std::vector<std::string> stageKeys;  // per slot: its daemon's public key ("" when insecure)
};

class Coordinator {
 public:
  // resume: the job was left unfinished (this daemon restarted) or is resumed by request;
  // it goes on from its last complete checkpoint.
  Coordinator(zmq::context_t& context, JobTable& table, std::string jobId, protocol::JobSpec spec,
              std::string specText, CoordinatorOptions options, bool resume = false);
  ~Coordinator();  // stops and joins

  void stop() { stopping_ = true; }
  bool finished() const { return finished_.load(); }

 private:
  // Rejoin: a healing job's pipeline that had left can train again (its daemons answer).
  enum class Outcome { Succeeded, Cancelled, Stopped, Retry, Rejoin };
  void run();
  // One attempt from the checkpoint after `fromStep` (-1: from scratch). Throws on a final
  // failure; returns Retry with `why` set when a restart may help.
  Outcome runAttempt(int attempt, int64_t fromStep, std::string& why);
  // Waits (with back-off, up to the spec's restart_timeout_s) until every stage daemon answers.
  bool waitForStages();
  void prepareAndStart(int attempt, int64_t fromStep);
  // Plans from the profiles taken before `step` and sends the plan to every stage.
  void plan(const std::vector<nlohmann::json>& profiles, int64_t step, const std::string& reason);
  // Asks every stage to profile again before `step`; false if one had passed it already.
  bool requestProfiles(int64_t step);
  // The input_shape to send slot `slot`'s prepare: the previous stage's reported output
  // where the spec gives none (a TorchScript stage after the first), else empty. An event
  // says what was inferred, on the first attempt.
  std::vector<int64_t> inferInputShape(const std::vector<std::vector<int64_t>>& outputs, int slot, int attempt);
  void sendToStages(const nlohmann::json& message, std::chrono::milliseconds timeout);
  // Aborts the stage copies that train, except on the daemons in `skip`, through the
  // connections postToSlots uses: a copy applies a commit posted there before it stops.
  void abortStages(const std::set<std::string>& skip = {});

  // Healing (protocol::heals; docs/operations.md, "Failures"). Each step is applied once every slot that
  // trains is ready for it: the coordinator then posts the commit, in order with the aborts
  // it may post after (postToSlots: one connection per slot). When a copy is lost, the
  // pipelines whose daemons all still answer go on from the last committed step, which
  // their daemons kept in memory, with the batch split over them (heal); a pipeline whose
  // daemons answer again rejoins at a commit, taking the state from a healthy copy.
  bool isActive(int slot) const;
  // Sets pipelines_ (sorted; all of them: empty).
  void setPipelines(std::vector<int> pipelines);
  // Whether `pipelines` pipelines can train the job: the batch and the plan's micro-batches
  // split over them.
  bool fits(size_t pipelines) const;
  std::vector<int> activePipelines() const;
  void postToSlots(const nlohmann::json& message);
  protocol::ControlClient& slotClient(int slot);  // postToSlots' connection to a slot, kept
  // The active pipelines whose slots' daemons all answer a ping now; adds the daemons that
  // do not to `silent`.
  std::vector<int> wholePipelines(std::set<std::string>& silent);
  // After a failure (on record): heals in place if it can (and says so in an event), else false.
  bool tryHeal(int attempt);
  // Outcome::Rejoin: the next attempt adds rejoining_ to the pipelines that train.
  void beginRejoin(int attempt);
  // A control client to the daemon of a slot (a stage's copy, job_spec.h), authenticated by its key.
  std::unique_ptr<protocol::ControlClient> makeClient(int slot);
  int slots() const;
  // A stage request addressed to a slot's stage and replica of this job.
  nlohmann::json addressed(nlohmann::json message, int slot) const;

  zmq::context_t& context_;
  JobTable& table_;
  std::string jobId_;
  protocol::JobSpec spec_;
  std::string specText_;
  CoordinatorOptions options_;
  bool resume_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> finished_{false};
  double predictedStepSeconds_ = 0;
  scheduler::PlannerInput profiled_;  // the plan in force's input, before calibration
  int plannedMicroBatches_ = 1;
  std::vector<double> calibration_;   // per stage: seconds per micro-batch profiling misses
  std::vector<std::string> admissions_;  // per slot: what its daemon's admission estimated (prepare's reply)
  std::vector<int> pipelines_;   // those that train (empty: all)
  std::vector<int> joiners_;     // of those, the ones that rejoin in this attempt (state from a peer)
  std::vector<int> rejoining_;   // Outcome::Rejoin's: the pipelines that may train again
  std::string resumeFrom_;       // "memory": this attempt resumes from the stages' kept state
  int64_t committed_ = -1;       // the newest step committed (a healing job)
  int64_t healedAt_ = -2;        // committed_ at the last heal
  std::vector<std::unique_ptr<protocol::ControlClient>> slotClients_;  // postToSlots', per slot
  std::thread thread_;  // owns a DEALER per stage daemon (inside run)
};

}  // namespace skytrain::daemon
