// Daemon: one skytraind. Binds the control and data endpoints, coordinates the jobs
// submitted to it and hosts stages of any job. run() is the control thread.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "daemon/config.h"
#include "daemon/protocol/control.h"

namespace skytrain::daemon {

class Coordinator;
class DataRouter;
class JobTable;
class StageHost;

class Daemon {
 public:
  // Binds both endpoints, starts the data thread and loads the job records. Throws
  // skytrain::Error if an endpoint cannot be bound or the state dir cannot be written.
  explicit Daemon(DaemonConfig config);
  ~Daemon();

  // Serves control requests until stop(); then aborts hosted stages and coordinators.
  void run();
  // Safe from any thread and from a signal handler.
  void stop() { stopping_ = true; }

  // Endpoints as peers reach them (wildcard hosts replaced, ephemeral ports resolved).
  const std::string& controlEndpoint() const { return controlEndpoint_; }
  const std::string& dataEndpoint() const { return dataEndpoint_; }

 private:
  protocol::Json handle(const protocol::Json& request);
  protocol::Json submit(const protocol::Json& request);
  protocol::Json cancel(const protocol::Json& request);
  void reapCoordinators();

  DaemonConfig config_;
  zmq::context_t context_;
  zmq::socket_t control_;  // ROUTER; owned by the control thread (run)
  std::string controlEndpoint_;
  std::string dataEndpoint_;
  std::unique_ptr<DataRouter> router_;
  std::unique_ptr<JobTable> jobs_;
  std::unique_ptr<StageHost> stages_;
  std::map<std::string, std::unique_ptr<Coordinator>> coordinators_;  // control thread only
  std::atomic<bool> stopping_{false};
};

// The activation-stash budget a stage reports to the planner: memory_budget_mb, or half
// of this machine's physical memory when it is 0.
double memoryBudgetBytes(const DaemonConfig& config);

// Replaces a wildcard host ("0.0.0.0", "*", "[::]") in a bound endpoint with `host`
// (this machine's host name when empty).
std::string advertisedEndpoint(const std::string& bound, const std::string& host);

}  // namespace skytrain::daemon
