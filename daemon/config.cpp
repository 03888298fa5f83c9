#include "daemon/config.h"

#include <fstream>
#include <sstream>

#include "daemon/protocol/json_reader.h"
#include "daemon/protocol/keys.h"
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
  c.metricsAddress = r.string("metrics_address", c.metricsAddress);
  c.secretKeyFile = r.string("secret_key_file", "");
  c.authorizedKeys = r.string("authorized_keys", "");
  c.knownDaemons = r.string("known_daemons", "");
  c.insecure = r.boolean("insecure", c.insecure);
  c.dataRoots = r.strings("data_roots", std::vector<std::string>{});
  c.torchThreads = static_cast<int>(r.integer("torch_threads", c.torchThreads, 0, 1024));
  c.logLevel = r.string("log_level", c.logLevel);
  c.logFormat = r.string("log_format", c.logFormat);
  c.memoryBudgetMb = r.integer("memory_budget_mb", c.memoryBudgetMb, 0, int64_t{1} << 40);
  c.prepareTimeoutS = r.number("prepare_timeout_s", c.prepareTimeoutS, 0.1, 86400);
  c.maxFrameMb = r.integer("max_frame_mb", c.maxFrameMb, 1, 1 << 20);
  r.finish();
  if (c.logLevel != "debug" && c.logLevel != "info" && c.logLevel != "warn" && c.logLevel != "error") {
    throw SpecError("$.log_level", "\"" + c.logLevel + "\" is not one of debug, info, warn, error");
  }
  if (c.logFormat != "text" && c.logFormat != "json") {
    throw SpecError("$.log_format", "\"" + c.logFormat + "\" is not one of text, json");
  }
  if (c.stateDir.empty()) throw SpecError("$.state_dir", "must not be empty");
  if (c.dataRoots.empty()) c.dataRoots = {c.stateDir + "/data"};
  if (c.insecure) {
    const std::pair<const char*, std::string> endpoints[] = {{"$.control_endpoint", c.controlEndpoint},
                                                             {"$.data_endpoint", c.dataEndpoint},
                                                             {"$.advertise_data_endpoint", c.advertiseDataEndpoint}};
    for (const auto& [path, endpoint] : endpoints) {
      if (!endpoint.empty() && !protocol::isLoopbackEndpoint(endpoint)) {
        throw SpecError(path, "\"" + endpoint + "\" is not a loopback endpoint, and \"insecure\": true (no "
                              "encryption, no authentication) binds loopback only; give secret_key_file and "
                              "authorized_keys instead");
      }
    }
    if (!c.secretKeyFile.empty() || !c.authorizedKeys.empty()) {
      throw SpecError("$.insecure", "is true but keys are configured: choose one");
    }
  } else {
    if (c.secretKeyFile.empty()) throw SpecError("$.secret_key_file", "required (or \"insecure\": true on loopback)");
    if (c.authorizedKeys.empty()) throw SpecError("$.authorized_keys", "required (or \"insecure\": true on loopback)");
  }
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
