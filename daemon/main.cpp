// skytraind: one per cluster, run by systemd (Type=notify).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>
#include <torch/torch.h>

#include <csignal>

#include "daemon/daemon.h"
#include "daemon/ops/allocator.h"
#include "daemon/ops/blas_info.h"
#include "daemon/ops/config.h"
#include "daemon/ops/logging.h"
#include "daemon/sentinel.h"

namespace {
skytrain::daemon::Daemon* gDaemon = nullptr;
void onSignal(int signal) {
  if (!gDaemon) return;
  if (signal == SIGHUP) {
    gDaemon->requestReload();
  } else {
    gDaemon->stop();
  }
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"skytraind: the skytrain daemon (one per cluster)"};
  std::string configPath = "/etc/skytrain/skytraind.json";
  app.add_option("-c,--config", configPath, "daemon config file (JSON)");
  app.set_version_flag("--version", std::string("skytraind ") + SKYTRAIN_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and a pointer to --help
    return 2;     // a usage error, as getopt-style tools exit (CLI11's own codes are 105-109)
  }
  // Frames and activations of tens of MB are allocated and freed every micro-batch: keep
  // their pages (daemon/ops/allocator.h).
  const bool allocatorSet = skytrain::daemon::keepFreedMemory();
  try {
    const auto config = skytrain::daemon::loadDaemonConfig(configPath);
    skytrain::daemon::setupLogging(config.logLevel, config.logFormat);
    if (!allocatorSet) spdlog::warn("glibc refused an allocator setting: large tensors may page-fault every step");
    if (config.torchThreads > 0) {
      torch::set_num_threads(config.torchThreads);
      if (!skytrain::daemon::setBlasThreads(config.torchThreads)) spdlog::info("BLAS threads: not OpenBLAS, left as they are");
    }
    torch::mm(torch::ones({2, 2}), torch::ones({2, 2}));  // loads the BLAS
    const auto blas = skytrain::daemon::detectBlas();
    spdlog::info("BLAS: {} ({}), torch threads {}", blas.name, blas.path.empty() ? "not found" : blas.path,
                 torch::get_num_threads());
    if (blas.isReference()) {
      spdlog::warn("BLAS is the slow reference implementation: matrix products run 15-30x slower. "
                   "Install libopenblas0-pthread (deploy/install-deps.sh does).");
    }
    if (const auto verdict = skytrain::daemon::takeLastExit(config.stateDir)) {
      spdlog::warn("skytraind: the previous daemon's sentinel reported: {}", *verdict);
    }
    // Started before the stages allocate anything, so the cgroup's count of kills for memory
    // it reads first is from before this daemon's (daemon/sentinel.h).
    std::string why;
    const auto sentinel = skytrain::daemon::spawnSentinel(configPath, why);
    if (!sentinel) spdlog::warn("skytraind: no sentinel ({}): a kill for memory will show only as a lost daemon", why);
    skytrain::daemon::Daemon daemon(config);
    if (sentinel) skytrain::daemon::tellSentinel(*sentinel, daemon.boundControlEndpoint());
    gDaemon = &daemon;
    std::signal(SIGTERM, onSignal);
    std::signal(SIGINT, onSignal);
    std::signal(SIGHUP, onSignal);  // systemctl reload: the authorized keys are read again
    // systemd's watchdog (WatchdogSec=) hears from the control loop only while it turns.
    daemon.setHeartbeat([] { sd_notify(0, "WATCHDOG=1"); });
    sd_notify(0, "READY=1");
    daemon.run();
    sd_notify(0, "STOPPING=1");
    gDaemon = nullptr;
  } catch (const std::exception& e) {
    spdlog::critical("skytraind: {}", e.what());
    return 1;
  }
  return 0;
}
