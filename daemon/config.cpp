#include "daemon/config.h"

#include <fstream>
#include <sstream>

#include "daemon/protocol/json_reader.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

DaemonConfig parseDaemonConfig(const std::string& text) {
  const auto document = protocol::parseBoundedJson(text, 1 << 20, 8);
  protocol::ObjectReader r(document, "$");
  DaemonConfig c;
  c.controlEndpoint = r.string("control_endpoint", c.controlEndpoint);
  c.dataEndpoint = r.string("data_endpoint", c.dataEndpoint);
  c.advertiseHost = r.string("advertise_host", c.advertiseHost);
  c.advertiseDataEndpoint = r.string("advertise_data_endpoint", c.advertiseDataEndpoint);
  c.stateDir = r.string("state_dir", c.stateDir);
  c.insecure = r.boolean("insecure", c.insecure);
  c.torchThreads = static_cast<int>(r.integer("torch_threads", c.torchThreads, 0, 1024));
  c.logLevel = r.string("log_level", c.logLevel);
  c.memoryBudgetMb = r.integer("memory_budget_mb", c.memoryBudgetMb, 0, int64_t{1} << 40);
  r.finish();
  if (c.logLevel != "debug" && c.logLevel != "info" && c.logLevel != "warn" && c.logLevel != "error") {
    throw SpecError("$.log_level", "\"" + c.logLevel + "\" is not one of debug, info, warn, error");
  }
  if (!c.insecure) {
    throw SpecError("$.insecure",
                    "CURVE encryption is not available in this version; set \"insecure\": true to run "
                    "unencrypted (loopback or a trusted network only)");
  }
  if (c.stateDir.empty()) throw SpecError("$.state_dir", "must not be empty");
  return c;
}

DaemonConfig loadDaemonConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("config file \"" + path + "\" cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parseDaemonConfig(text.str());
  } catch (const SpecError& e) {
    throw Error("config file \"" + path + "\": " + e.what());
  }
}

}  // namespace skytrain::daemon
