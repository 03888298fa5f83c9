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

#include "daemon/jobs/job_table.h"
#include "daemon/coordinator/stage_fleet.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/spec/job_spec.h"
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
  void prepareAndStart(int attempt, int64_t fromStep);
  // The input_shape to send slot `slot`'s prepare: the previous stage's reported output
  // where the spec gives none (a TorchScript stage after the first), else empty. An event
  // says what was inferred, on the first attempt.
  std::vector<int64_t> inferInputShape(const std::vector<std::vector<int64_t>>& outputs, int slot, int attempt);
  // Healing (protocol::heals; docs/operations.md, "Failures"). Each step is applied once every slot that
  // trains is ready for it: the coordinator then posts the commit (StageFleet::post), in order
  // with the aborts it may post after. When a copy is lost, the pipelines whose daemons all
  // still answer go on from the last committed step, which their daemons kept in memory, with
  // the batch split over them (heal); a pipeline whose daemons answer again rejoins at a
  // commit, taking the state from a healthy copy.
  // Whether `pipelines` pipelines can train the job: the batch and the plan's micro-batches
  // split over them.
  bool fits(size_t pipelines) const;
  // After a failure (on record): heals in place if it can (and says so in an event), else false.
  bool tryHeal(int attempt);
  // Outcome::Rejoin: the next attempt adds rejoining_ to the pipelines that train.
  void beginRejoin(int attempt);

  zmq::context_t& context_;
  JobTable& table_;
  std::string jobId_;
  protocol::JobSpec spec_;
  std::string specText_;
  CoordinatorOptions options_;
  bool resume_;
  StageFleet fleet_;  // the stage copies, and which pipelines train
  std::atomic<bool> stopping_{false};
  std::atomic<bool> finished_{false};
  std::vector<double> calibration_;   // per stage: seconds per micro-batch profiling misses
  std::vector<std::string> admissions_;  // per slot: what its daemon's admission estimated (prepare's reply)
  std::vector<int> joiners_;     // of those, the ones that rejoin in this attempt (state from a peer)
  std::vector<int> rejoining_;   // Outcome::Rejoin's: the pipelines that may train again
  std::string resumeFrom_;       // "memory": this attempt resumes from the stages' kept state
  int64_t committed_ = -1;       // the newest step committed (a healing job)
  int64_t healedAt_ = -2;        // committed_ at the last heal
  std::thread thread_;  // owns a DEALER per stage daemon (inside run)
};

}  // namespace skytrain::daemon
