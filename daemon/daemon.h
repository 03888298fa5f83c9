// Daemon: one skytraind. Binds the control and data endpoints, coordinates the jobs
// submitted to it and hosts stages of any job. run() is the control thread.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <string>

#include "daemon/net/access.h"
#include "daemon/ops/config.h"
#include "daemon/ops/log_limiter.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/spec/job_spec.h"
#include "daemon/protocol/messages.h"

namespace skytrain::daemon {

class Coordinator;
class DataRouter;
class JobTable;
class MetricsServer;
class StageHost;
class ZapHandler;

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
  // Reloads the authorized keys at the next turn of the control loop (SIGHUP). Safe from a
  // signal handler.
  void requestReload() { reloadRequested_ = true; }
  // Called from the control loop about once a second while it runs (systemd's watchdog).
  void setHeartbeat(std::function<void()> beat) { heartbeat_ = std::move(beat); }

  // Answers one control message as it arrived (body bytes and the sender's ZAP User-Id);
  // nullopt for one-way messages. Never throws: a failure is an error reply.
  std::optional<std::string> answer(const zmq::message_t& body);

  const SecurityCounters& counters() const { return counters_; }

  // Endpoints as peers reach them (wildcard hosts replaced, ephemeral ports resolved).
  const std::string& controlEndpoint() const { return controlEndpoint_; }
  // What the control socket is bound to (a wildcard host stays one): the sentinel binds it.
  const std::string& boundControlEndpoint() const { return boundControl_; }
  const std::string& dataEndpoint() const { return dataEndpoint_; }
  // The port /metrics is served on; 0 when it is not.
  int metricsPort() const;

 private:
  protocol::Json handle(const protocol::Request& request, const Caller& caller);
  protocol::Json submit(const protocol::Submit& request, const Caller& caller);
  protocol::Json cancel(const protocol::Cancel& request, const Caller& caller);
  protocol::Json resume(const protocol::Resume& request, const Caller& caller);
  // Starts a coordinator for a job in the table; resume: from its last complete checkpoint.
  void coordinate(const std::string& id, bool resume);
  protocol::Json ping(const Caller& caller) const;
  void report(const protocol::StageReport& report, const Caller& caller);
  // Throws unless the caller owns the job or is an admin.
  void checkOwner(const std::string& job, const Caller& caller, const char* action);
  // Throws a Refusal; answer() counts it, logs it with the caller and replies with it.
  [[noreturn]] static void refuse(const std::string& what);
  // Public keys of the job's stage daemons, from the spec or the known daemons.
  // Throws Refusal unless `caller` is the daemon hosting ref's stage copy in its job.
  void checkStageSender(const protocol::StageRef& ref, const Caller& caller, const std::string& what) const;
  std::vector<std::string> stageKeys(const protocol::JobSpec& spec) const;
  void reapCoordinators();

  DaemonConfig config_;
  zmq::context_t context_;
  SecurityCounters counters_;
  LogLimiter refusals_{"security: refused"};             // refused requests: a flood logs a summary
  LogLimiter reportRefusals_{"control: refused a stage report:"};
  std::unique_ptr<AccessList> access_;
  std::unique_ptr<ZapHandler> zap_;  // bound before any server socket
  zmq::socket_t control_;  // ROUTER; owned by the control thread (run)
  std::string controlEndpoint_;
  std::string boundControl_;
  std::string dataEndpoint_;
  std::unique_ptr<DataRouter> router_;
  std::unique_ptr<JobTable> jobs_;
  std::unique_ptr<StageHost> stages_;
  std::unique_ptr<MetricsServer> metrics_;
  std::vector<std::string> unfinished_;  // jobs to resume when run() begins
  std::map<std::string, std::unique_ptr<Coordinator>> coordinators_;  // control thread only
  std::atomic<bool> stopping_{false};
  std::atomic<bool> reloadRequested_{false};
  std::function<void()> heartbeat_;
};

// The memory one hosted stage may use (admission refuses a stage estimated over it, the
// planner fits the stash under it): memory_budget_mb, or when it is 0 what this daemon may
// really use, its cgroup's limit or else the physical memory (ops/memory_limit.h).
struct MemoryBudget {
  double bytes = 0;
  std::string source;  // for the start-up log line
};
MemoryBudget memoryBudget(const DaemonConfig& config);

// Replaces a wildcard host ("0.0.0.0", "*", "[::]") in a bound endpoint with `host`
// (this machine's host name when empty).
std::string advertisedEndpoint(const std::string& bound, const std::string& host);

}  // namespace skytrain::daemon
