#include "daemon/ops/config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "daemon/protocol/json_reader.h"
#include "daemon/protocol/keys.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

bool isPrivateAddress(const std::string& address) {
  unsigned char b[16];
  if (inet_pton(AF_INET, address.c_str(), b) == 1) {
    return b[0] == 10 || b[0] == 127 || (b[0] == 172 && (b[1] & 0xf0) == 16) || (b[0] == 192 && b[1] == 168);
  }
  if (inet_pton(AF_INET6, address.c_str(), b) == 1) {
    static const unsigned char loopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return std::equal(b, b + 16, loopback) || (b[0] & 0xfe) == 0xfc;
  }
  return false;
}

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
  c.metricsRetentionS = r.number("metrics_retention_s", c.metricsRetentionS, 0, 1e9);
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
  c.privateAddress = r.string("private_address", "");
  r.finish();
  if (!c.privateAddress.empty() && !isPrivateAddress(c.privateAddress)) {
    throw SpecError("$.private_address", "\"" + c.privateAddress.substr(0, 64) +
                                             "\" is not a private or loopback IP address (10/8, 172.16/12, 192.168/16, "
                                             "127/8, ::1, fc00::/7): c10d's Gloo connections have no authentication");
  }
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
  if (!in) throw Error("config file \"" + path + "\" cannot be read: " + std::string(std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return parseDaemonConfig(text.str());
  } catch (const SpecError& e) {
    throw Error("config file \"" + path + "\": " + e.what());
  }
}

}  // namespace skytrain::daemon
