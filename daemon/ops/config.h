// DaemonConfig: skytraind's settings, read once from /etc/skytrain/skytraind.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace skytrain::daemon {

struct DaemonConfig {
  // ZeroMQ endpoints bound by the daemon: two ports whatever the number of jobs.
  // "tcp://127.0.0.1:*" binds an ephemeral port (tests).
  std::string controlEndpoint = "tcp://0.0.0.0:7100";
  std::string dataEndpoint = "tcp://0.0.0.0:7101";
  // Host other daemons use to reach this one when an endpoint binds a wildcard address;
  // empty: this machine's host name.
  std::string advertiseHost;
  // The data endpoint peers connect to, when it is not the bound one (e.g. a relay or a
  // NAT in front of it: the WAN testbed's delay relays). Empty: derived from the bound one.
  std::string advertiseDataEndpoint;
  std::string stateDir = "/var/lib/skytrain";
  // Where /metrics is served over plain HTTP ("host:port"; port 0: a free one, written to
  // the state dir's endpoints.json). It shows job names and figures but accepts no
  // commands; keep it on loopback or the cluster's private network. Empty: not served.
  std::string metricsAddress = "127.0.0.1:7102";
  // How long a finished job's series stay in /metrics (seconds; 0: forever). Its record,
  // status and logs stay regardless.
  double metricsRetentionS = 86400;
  // CURVE identity: this daemon's secret key file (skytrain keygen), the keys it admits
  // ("<public key> <role> <name>" lines, reloaded on SIGHUP) and the public keys of the
  // daemons it connects to ("<control endpoint> <public key>" lines).
  std::string secretKeyFile;
  std::string authorizedKeys;
  std::string knownDaemons;
  // Plaintext, no keys: for development on loopback only; any other endpoint is refused.
  bool insecure = false;
  // Data files of jobs must resolve (after symlinks) under one of these; empty: the state
  // dir's data/.
  std::vector<std::string> dataRoots;
  int torchThreads = 0;  // 0: LibTorch's default
  // Memory a hosted stage may use: weights, gradients, optimizer state, activation stash
  // and data; a stage whose estimate exceeds it is refused. 0: what the daemon may really use,
  // its cgroup's memory limit or else the physical memory (ops/memory_limit.h).
  int64_t memoryBudgetMb = 0;
  // A prepared stage not started within this many seconds is freed.
  double prepareTimeoutS = 60;
  // Largest data frame accepted (ZeroMQ drops bigger messages and their connection).
  int64_t maxFrameMb = 1024;
  std::string logLevel = "info";
  // "text" for people, "json" (one object a line) for log shippers.
  std::string logFormat = "text";
  // The cluster's private address (an IP literal in 10/8, 172.16/12, 192.168/16, 127/8,
  // ::1 or fc00::/7): where a replicated stage's c10d Gloo connections bind. Empty: this
  // daemon hosts no replicated stage.
  std::string privateAddress;
};

// True for an IP literal in a private or loopback range (the list above).
bool isPrivateAddress(const std::string& address);

// Throws skytrain::SpecError naming the JSON path of a bad or unknown field.
DaemonConfig parseDaemonConfig(const std::string& text);
// Reads and parses a config file; throws skytrain::Error naming the path if unreadable.
DaemonConfig loadDaemonConfig(const std::string& path);

}  // namespace skytrain::daemon
