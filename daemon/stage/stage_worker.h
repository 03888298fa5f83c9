// StageWorker: the thread that runs one hosted stage of one job, from building the model
// to saving its weights, and reports each step to the job's coordinator.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "daemon/net/mailbox.h"
#include "daemon/ops/timing.h"
#include "daemon/protocol/job_spec.h"
#include "daemon/protocol/keys.h"
#include "daemon/protocol/messages.h"
#include "daemon/stage/pipeline_runner.h"

namespace skytrain::daemon {

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
  std::thread thread_;  // owns the stage, its optimizer, data and sockets
};

}  // namespace skytrain::daemon
