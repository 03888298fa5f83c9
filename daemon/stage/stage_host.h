// StageHost: the stages this daemon hosts, whatever daemon coordinates their jobs.
// Handles the stage.* requests on the control thread. A stage accepts them only from the
// key that prepared it (its job's coordinator).
#pragma once

#include <zmq.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/net/data_router.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/messages.h"
#include "daemon/stage/stage_worker.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

struct StageHostOptions {
  std::string stateDir;
  std::string dataEndpoint;         // as peers reach it
  double memoryBudgetBytes = 0;     // for every stage hosted here: weights, optimizer state, stash, data
  std::string memoryBudgetSource = "memory_budget_mb";  // where it came from, for refusals
  std::vector<std::string> dataRoots;
  double prepareTimeoutS = 60;      // a prepared stage not started by then is freed
  protocol::KeyPair self;           // for the stage's own connections (empty when insecure)
  std::string privateAddress;       // where a replicated stage's Gloo connections bind ("": none)
};

// A request for a stage this daemon freed (its coordinator went silent): the reply carries
// why, as "freed", for the coordinator to tell it from a daemon that lost the stage.
class StageFreed : public Error {
 public:
  StageFreed(const std::string& message, std::string why) : Error(message), why_(std::move(why)) {}
  const std::string& why() const { return why_; }

 private:
  std::string why_;
};

class StageHost {
 public:
  StageHost(zmq::context_t& context, DataRouter& router, StageHostOptions options);
  ~StageHost();

  // Each returns the reply; bad or unauthorised requests throw skytrain::Error (answered
  // as errors). `caller` is the sender's public key.
  protocol::Json prepare(const protocol::StagePrepare& request, const std::string& caller);
  protocol::Json start(const protocol::StageStart& request, const std::string& caller);
  protocol::Json abort(const protocol::StageAbort& request, const std::string& caller);
  protocol::Json plan(const protocol::StagePlan& request, const std::string& caller);
  protocol::Json profile(const protocol::StageProfile& request, const std::string& caller);
  protocol::Json heartbeat(const protocol::StageHeartbeat& request, const std::string& caller);
  protocol::Json commit(const protocol::StageCommit& request, const std::string& caller);

  // Aborts stages whose coordinator has been silent past their job's bound; joins finished
  // workers and closes their mailboxes.
  void reap();
  size_t active() const { return workers_.size(); }

 private:
  // The memory admitted for the unfinished stages hosted here of jobs other than exceptJob,
  // and how many they are.
  std::pair<double, int> hosted(const std::string& exceptJob) const;
  // Throws Refusal when this daemon hosts any stage of ref's job for a key other than caller.
  void checkCoordinator(const protocol::StageRef& ref, const std::string& caller) const;
  // The worker of (job, stage, replica) if `caller` coordinates it; throws otherwise.
  StageWorker& find(const protocol::StageRef& ref, const std::string& caller);

  zmq::context_t& context_;
  DataRouter& router_;
  StageHostOptions options_;
  std::map<std::tuple<std::string, int, int>, std::unique_ptr<StageWorker>> workers_;  // (job, stage, replica)
  std::vector<std::unique_ptr<StageWorker>> retired_;  // earlier attempts, aborted, not yet joined
  // Why stages were freed without their coordinator's word (job, stage, replica), so a late
  // request hears the reason, not only "not hosted here". Cleared when it reaches kFreedKept.
  static constexpr size_t kFreedKept = 1024;
  static constexpr double kStallS = 1.0;  // a gap between reaps that means this process was stopped
  std::chrono::steady_clock::time_point lastReap_ = std::chrono::steady_clock::now();
  std::map<std::tuple<std::string, int, int>, std::string> freed_;
  // A healing job's stages: what each copy keeps when its attempt stops, for the next
  // attempt's prepare ("resume_from": "memory"), with the coordinator it belongs to. Freed
  // prepare_timeout_s after the copy stopped if no prepare took it.
  struct Kept {
    std::shared_ptr<KeptState> state;
    std::string coordinatorKey;
  };
  std::map<std::tuple<std::string, int, int>, Kept> kept_;
};

// The 64-bit key in the frames of one instance of a job's stage: a hash of the job id
// ("0123456789abcdef"), the attempt (frames of an aborted attempt are dropped) and the
// replica (each copy's pipeline has its own frames). The stage is the frame's own field. A
// collision is refused where routes open (DataRouter::open). Throws skytrain::Error if the
// id is not 16 hex digits.
uint64_t jobKey(const std::string& jobId, int attempt = 0, int replica = 0);

}  // namespace skytrain::daemon
