// DaemonConfig: skytraind's settings, read once from /etc/skytrain/skytraind.json.
#pragma once

#include <cstdint>
#include <string>

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
  // Must be true until CURVE is configured: traffic is then unencrypted, for loopback or
  // trusted networks only.
  bool insecure = false;
  int torchThreads = 0;  // 0: LibTorch's default
  int64_t memoryBudgetMb = 0;  // activation stash per hosted stage; 0: half the physical memory
  std::string logLevel = "info";
};

// Throws skytrain::SpecError naming the JSON path of a bad or unknown field.
DaemonConfig parseDaemonConfig(const std::string& text);
// Reads and parses a config file; throws skytrain::Error naming the path if unreadable.
DaemonConfig loadDaemonConfig(const std::string& path);

}  // namespace skytrain::daemon
