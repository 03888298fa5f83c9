#include "daemon/sentinel.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <zmq_addon.hpp>

#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "daemon/net/access.h"
#include "daemon/net/zap_handler.h"
#include "daemon/ops/files.h"
#include "daemon/ops/memory_limit.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/printable.h"

extern char** environ;

namespace skytrain::daemon {
namespace {

using protocol::Json;
namespace fs = std::filesystem;

constexpr size_t kMaxPipeBytes = 4096;        // the daemon writes one endpoint line
constexpr size_t kMaxLastExitBytes = 16384;
constexpr int kSentinelPipeFd = 3;

// Reads the pipe until the daemon's end closes (its death or exit); returns the last line.
std::string awaitClose(int pipe) {
  std::string text, line;
  char buffer[512];
  while (true) {
    const ssize_t n = ::read(pipe, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (text.size() < kMaxPipeBytes) text.append(buffer, static_cast<size_t>(n));
  }
  std::stringstream lines(text);
  std::string last;
  while (std::getline(lines, line)) {
    if (!line.empty()) last = line;
  }
  return last;
}

// Answers every control request on `endpoint` with the verdict until the deadline.
void answer(const DaemonConfig& config, const std::string& endpoint, const std::string& verdict, const Json& killed) {
  zmq::context_t context(1);
  SecurityCounters counters;
  std::unique_ptr<AccessList> access;
  std::unique_ptr<ZapHandler> zap;
  zmq::socket_t router(context, zmq::socket_type::router);
  if (config.insecure) {
    access = std::make_unique<AccessList>();
  } else {
    access = std::make_unique<AccessList>(config.authorizedKeys, protocol::loadKeyPair(config.secretKeyFile));
    zap = std::make_unique<ZapHandler>(context, *access, counters);
    applyCurveServer(router, access->self());
  }
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(protocol::kControlSocketLimit));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kSentinelAnswerSeconds);
  // The dead daemon's socket may take a moment to be released.
  for (bool bound = false; !bound;) {
    try {
      router.bind(endpoint);
      bound = true;
    } catch (const zmq::error_t& e) {
      if (std::chrono::steady_clock::now() > deadline) {
        spdlog::warn("sentinel: cannot answer on {}: {}", endpoint, e.what());
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  spdlog::info("sentinel: answering on {} for {:.0f} s with the verdict", endpoint, kSentinelAnswerSeconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!protocol::waitReadable(router, std::chrono::milliseconds(100))) continue;
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(router, std::back_inserter(parts), zmq::recv_flags::dontwait) || parts.size() != 2) continue;
    Json reply = protocol::errorReply(verdict);
    reply["killed"] = killed;
    try {  // whatever the request says, it gets the verdict; only its id is read
      const Json request = protocol::parseControlMessage(parts[1].data(), parts[1].size());
      if (request.value("type", std::string()) == protocol::kStageReport) continue;  // one-way
      if (auto id = request.find("id"); id != request.end() && id->is_number_unsigned()) reply["id"] = *id;
    } catch (const std::exception&) {
    }
    router.send(parts[0], zmq::send_flags::sndmore);
    router.send(zmq::buffer(protocol::toText(reply)), zmq::send_flags::dontwait);
  }
}

}  // namespace

std::string memoryKillVerdict(pid_t daemon, const std::string& cgroup, int64_t killsBefore, int64_t killsAfter,
                              double limitBytes, const std::string& limitSource, double peakBytes) {
  std::string text = "skytraind (pid " + std::to_string(daemon) + ") was killed by the kernel for memory: its cgroup " +
                     cgroup + " counted oom_kill " + std::to_string(killsBefore) + " -> " + std::to_string(killsAfter) +
                     "; limit " + megabytes(limitBytes) + " (" + limitSource + ")";
  if (peakBytes > 0) text += ", peak " + megabytes(peakBytes);
  return text;
}

std::optional<int> spawnSentinel(const std::string& configPath, std::string& why) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const std::string binary = (self.parent_path() / "skytraind-sentinel").string();
  if (ec || ::access(binary.c_str(), X_OK) != 0) {
    why = "no executable " + binary;
    return std::nullopt;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    why = std::string("pipe: ") + std::strerror(errno);
    return std::nullopt;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], kSentinelPipeFd);  // the copy is not close-on-exec
  const std::string pid = std::to_string(::getpid()), fd = std::to_string(kSentinelPipeFd);
  std::vector<std::string> args = {binary, "--config", configPath, "--daemon-pid", pid, "--pipe-fd", fd};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  const int rc = posix_spawn(&child, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[0]);
  if (rc != 0) {
    ::close(fds[1]);
    why = binary + ": " + std::strerror(rc);
    return std::nullopt;
  }
  // It outlives the daemon unless something ends it first: reaped here, never a zombie.
  std::thread([child] {
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    spdlog::warn("sentinel (pid {}) ended before the daemon ({}): a kill for memory will show only as a lost daemon",
                 child, WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status)) : "exit " + std::to_string(WEXITSTATUS(status)));
  }).detach();
  return fds[1];
}

void tellSentinel(int pipe, const std::string& boundControl) {
  const std::string line = boundControl + "\n";
  if (::write(pipe, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    spdlog::warn("sentinel: could not pass it the control endpoint: {}", std::strerror(errno));
  }
}

int runSentinel(const DaemonConfig& config, int pipe, pid_t daemon) {
  const MemoryEvents before = memoryEvents();
  const std::string endpoint = awaitClose(pipe);
  const MemoryEvents after = memoryEvents();
  if (before.oomKills < 0 || after.oomKills <= before.oomKills) return 0;  // not for memory: free the endpoint
  const MemoryLimit limit = memoryLimit();
  const std::string verdict =
      memoryKillVerdict(daemon, after.cgroup, before.oomKills, after.oomKills, limit.bytes, limit.source, after.peakBytes);
  spdlog::critical("sentinel: {}", verdict);
  const Json killed = {{"reason", "memory"},
                       {"pid", daemon},
                       {"oom_kills", after.oomKills - before.oomKills},
                       {"limit_bytes", limit.bytes},
                       {"peak_bytes", after.peakBytes},
                       {"time", static_cast<int64_t>(std::time(nullptr))}};
  try {
    writeFileAtomic(config.stateDir + "/" + kLastExitFile, Json{{"verdict", verdict}, {"killed", killed}}.dump());
  } catch (const std::exception& e) {
    spdlog::warn("sentinel: {}", e.what());
  }
  if (endpoint.empty()) return 0;
  // systemd stops what is left of the unit (OOMPolicy=stop): answer out the window first.
  std::signal(SIGTERM, SIG_IGN);
  try {
    answer(config, endpoint, verdict, killed);
  } catch (const std::exception& e) {
    spdlog::warn("sentinel: {}", e.what());
  }
  return 0;
}

std::optional<std::string> takeLastExit(const std::string& stateDir) {
  const std::string path = stateDir + "/" + kLastExitFile;
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  std::string text;
  try {
    text = readFile(path, kMaxLastExitBytes);
  } catch (const std::exception&) {
    text.clear();  // unreadable or too large: said below
  }
  fs::remove(path, ec);
  const Json record = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.value("verdict", Json()).is_string()) return "unreadable " + path;
  return protocol::printable(record["verdict"].get<std::string>());
}

}  // namespace skytrain::daemon
