// StageWorker: the thread that runs one hosted stage of one job, from building the model
// to saving its weights, and reports each step to the job's coordinator.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/net/mailbox.h"
#include "daemon/ops/timing.h"
#include "daemon/protocol/spec/job_spec.h"
#include "daemon/protocol/keys.h"
#include "daemon/protocol/messages.h"
#include "daemon/stage/kept_state.h"
#include "daemon/stage/runner/pipeline_runner.h"

namespace skytrain::daemon {

class ReplicaGroup;

struct StageAssignment {
  std::string jobId;
  uint64_t jobKey = 0;  // the 64-bit id in this attempt's frames (jobId mixed with the attempt)
  int attempt = 0;
  int64_t resumeStep = -1;  // restore the checkpoint after this step; -1: from scratch
  int stage = 0;
  int replica = 0;             // which copy of the stage (job_spec.h)
  std::string device = "cpu";  // the copy's placement's, checked to exist here
  std::string privateAddress;  // where a replicated stage's Gloo connections bind
  protocol::JobSpec spec;
  std::string coordinator;  // control endpoint that receives stage.report messages
  std::string coordinatorKey;  // the key that prepared the stage: the only one it obeys
  protocol::KeyPair self;      // this daemon's keys, for the stage's connections
  double prepareTimeoutS = 60;  // freed when not started by then
  std::string jobDir;       // where this stage writes its weights
  double memoryBudgetBytes = 0;  // for the activation stash, reported to the planner
  double admittedBytes = 0;      // admission's estimate less the daemon's runtime, which stages share
  // A healing job (protocol::heals): where the state after resumeStep comes from ("": a
  // checkpoint, "memory": `restoreFrom`, or a healthy copy where this daemon kept none of
  // that step; "peer": a healthy copy, over c10d), the pipelines that train, and where this
  // worker keeps its state when it stops.
  std::string resumeFrom;
  std::vector<int> pipelines;
  std::shared_ptr<KeptState> restoreFrom;
  std::shared_ptr<KeptState> keep;
};

class StageWorker {
 public:
  // Starts the thread, which builds the stage and then waits for start().
  StageWorker(zmq::context_t& context, StageAssignment assignment, std::shared_ptr<Mailbox> mailbox);
  ~StageWorker();  // aborts and joins

  // Gives the neighbours' data endpoints ("" at the pipeline's ends; a fan-in consumer's
  // producers) and their daemons' public keys, and lets the run begin.
  void start(const protocol::StageStart& neighbours);
  void abort();
  bool finished() const { return finished_.load(); }
  // A heartbeat from the coordinator; without one for the spec's bound, the stage aborts.
  void touch() {
    lastHeartbeat_ = Clock::now().time_since_epoch().count();
    heard_ = true;
  }
  double secondsSinceHeartbeat() const;
  // Whether any heartbeat came: the coordinator sends them once every stage is started,
  // which under load takes longer than the heartbeat's bound.
  bool heard() const { return heard_.load(); }
  // The newest checkpoint every stage has confirmed (from the heartbeats): never pruned.
  void keepCheckpoint(int64_t step) {
    if (step >= 0) complete_ = step;
  }
  // A healing job: the coordinator's word that `step` may be applied.
  void commit(int64_t step);

  // The coordinator's plan after a profile; the worker waits for it at that step boundary.
  void deliverPlan(const RunPlan& plan);
  // Profiles again at the boundary before step `atStep`. False if that step has begun.
  bool requestProfile(int atStep);
  const StageAssignment& assignment() const { return assignment_; }
  const Mailbox* mailbox() const { return mailbox_.get(); }

 private:
  void run();
  bool waitForStart();
  RunPlan waitForPlan();
  bool profileDue(int step);
  // A healing job, before each optimizer step: waits for the step's commit.
  void awaitCommit(int64_t step);
  // A healing job whose copies meet with some that have no state (`holds`: this one has):
  // the healthy copy with the lowest rank sends its state to them.
  void shareState(PipelineRunner& runner, ReplicaGroup& group, int64_t step, bool holds);
  // A healing job's worker that stops leaves its state (as of the last step it applied) in
  // assignment_.keep, for the next attempt; holdsState is false while it has none.
  void keepState(PipelineRunner* runner, bool holdsState);

  zmq::context_t& context_;
  StageAssignment assignment_;
  std::shared_ptr<Mailbox> mailbox_;
  std::mutex mutex_;  // guards the start signal, the endpoints, the plan and the steps below
  std::condition_variable startSignal_;
  bool started_ = false;
  std::optional<RunPlan> plan_;
  int currentStep_ = -1;
  int profileAt_ = 0;  // the step before which to profile; -1: none due
  protocol::StageStart neighbours_;
  std::atomic<bool> aborted_{false};
  std::atomic<Clock::rep> lastHeartbeat_{Clock::now().time_since_epoch().count()};
  std::atomic<bool> heard_{false};
  std::atomic<int64_t> complete_{-1};  // keepCheckpoint's; the resumed-from one at first
  std::atomic<bool> finished_{false};
  int64_t committed_ = -1;  // guarded by mutex_: the newest step the coordinator committed
  // The worker thread's, in a healing job: the newest step whose update it applied, the state
  // beside the weights as of then (PipelineRunner::extras), and whether an update is going in.
  int64_t applied_ = -1;
  std::vector<std::pair<std::string, at::Tensor>> appliedExtras_;
  bool applying_ = false;
  std::thread thread_;  // owns the stage, its optimizer, data and sockets
};

}  // namespace skytrain::daemon
