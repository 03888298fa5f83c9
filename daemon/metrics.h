// MetricsServer: skytraind's /metrics over HTTP in Prometheus's text format (prometheus-cpp's
// metric families and serializer) on the config's metrics_address. Figures are read at each
// scrape from the job table and the security counters, so nothing is counted twice.
//
// It is not prometheus-cpp's civetweb exposer: Debian's civetweb starts its threads with a
// stack smaller than the static TLS of a process that links LibTorch, so they never start
// ("Cannot create threads"). One thread answers GET /metrics, a request bounded to 8 KiB
// and 2 s.
//
// Per job (the jobs this daemon coordinates; labels job_id, and name from the spec — not
// "job", which Prometheus gives its scrape job): step, train
// and validation loss, tokens/s, step time measured and predicted, bubble, restarts,
// checkpoint age; per job and stage: bytes sent on the wire and raw per direction, compute
// time; per job and link: bandwidth and round trip as the planner measured them. Per daemon:
// jobs by state, refusals by reason, resident memory.
#pragma once

#include <memory>
#include <string>

namespace skytrain::daemon {

class JobTable;
struct SecurityCounters;

class MetricsServer {
 public:
  // Binds `address` ("<IPv4>:<port>"; port 0 picks a free one). Throws skytrain::Error naming
  // the address if it cannot be bound. The table and counters must outlive the server.
  MetricsServer(const std::string& address, const JobTable& jobs, const SecurityCounters& counters);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port (for logs and tests when the address asked for port 0).
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace skytrain::daemon
