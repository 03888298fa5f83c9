// MetricsServer: skytraind's /metrics over HTTP in Prometheus's text format (prometheus-cpp's
// metric families and serializer) on the config's metrics_address. Each scrape collects the
// collectables it was given, in their order, then this process's own family
// (process_resident_memory_bytes): figures are read at the scrape, so nothing is counted twice.
//
// It is not prometheus-cpp's civetweb exposer: Debian's civetweb starts its threads with a
// stack smaller than the static TLS of a process that links LibTorch, so they never start
// ("Cannot create threads"). One thread serves GET /metrics to up to 64 connections at
// once, each request bounded to 8 KiB and each connection to 5 s, so idle or slow
// connections cannot hold a scrape.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace prometheus {
class Collectable;
}

namespace skytrain::daemon {

class MetricsServer {
 public:
  // Binds `address` ("<IPv4>:<port>"; port 0 picks a free one). Throws skytrain::Error naming
  // the address if it cannot be bound. What the collectables read must outlive the server.
  MetricsServer(const std::string& address, std::vector<std::shared_ptr<prometheus::Collectable>> collectables);
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
