// StageHost: the stages this daemon hosts, whatever daemon coordinates their jobs.
// Handles stage.prepare / stage.start / stage.abort on the control thread.
#pragma once

#include <zmq.hpp>

#include <map>
#include <memory>
#include <string>

#include "daemon/data_router.h"
#include "daemon/protocol/control.h"
#include "daemon/stage_worker.h"

namespace skytrain::daemon {

class StageHost {
 public:
  StageHost(zmq::context_t& context, DataRouter& router, std::string stateDir, std::string dataEndpoint,
            double memoryBudgetBytes);
  ~StageHost();

  // Each returns the reply; bad requests throw skytrain::Error (answered as errors).
  protocol::Json prepare(const protocol::Json& request);
  protocol::Json start(const protocol::Json& request);
  protocol::Json abort(const protocol::Json& request);
  protocol::Json plan(const protocol::Json& request);
  protocol::Json profile(const protocol::Json& request);

  // Joins finished workers and closes their mailboxes.
  void reap();
  size_t active() const { return workers_.size(); }

 private:
  StageWorker& find(const protocol::Json& request);

  zmq::context_t& context_;
  DataRouter& router_;
  std::string stateDir_;
  std::string dataEndpoint_;
  double memoryBudgetBytes_;
  std::map<std::pair<std::string, int>, std::unique_ptr<StageWorker>> workers_;  // (job, stage)
};

// A job id ("0123456789abcdef") as the 64-bit key in frames; throws skytrain::Error if it
// is not 16 hex digits.
uint64_t jobKey(const std::string& jobId);

}  // namespace skytrain::daemon
