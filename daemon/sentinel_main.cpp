// skytraind-sentinel: started by skytraind beside itself (daemon/sentinel.h); not run by hand.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "daemon/ops/config.h"
#include "daemon/ops/logging.h"
#include "daemon/sentinel.h"

int main(int argc, char** argv) {
  CLI::App app{"skytraind-sentinel: reports a skytraind the kernel killed for memory (started by skytraind)"};
  std::string configPath;
  int daemonPid = 0, pipeFd = -1;
  app.add_option("--config", configPath, "the daemon's config file")->required();
  app.add_option("--daemon-pid", daemonPid, "the daemon it watches")->required();
  app.add_option("--pipe-fd", pipeFd, "the read end of the daemon's pipe")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const auto config = skytrain::daemon::loadDaemonConfig(configPath);
    skytrain::daemon::setupLogging(config.logLevel, config.logFormat);
    return skytrain::daemon::runSentinel(config, pipeFd, daemonPid);
  } catch (const std::exception& e) {
    spdlog::critical("skytraind-sentinel: {}", e.what());
    return 1;
  }
}
