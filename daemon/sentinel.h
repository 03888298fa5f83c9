// The sentinel: a small process (skytraind-sentinel, no Torch) that skytraind starts beside
// itself and that outlives it, so that a daemon the kernel kills for memory is reported as
// killed for memory — never as a stage that stopped answering. The daemon keeps the write
// end of a pipe whose read end the sentinel holds; when the daemon dies the pipe closes, the
// sentinel reads its cgroup's oom_kill count again, and if it rose it writes the verdict to
// the state dir (the next daemon logs it) and, for kSentinelAnswerSeconds, answers every
// control request on the dead daemon's endpoint — with its key, to the same authorised keys
// — with the verdict. A coordinator's heartbeats get it within a second and fail the job
// with it. A daemon that exits or dies for any other reason frees the endpoint at once.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "daemon/ops/config.h"

namespace skytrain::daemon {

constexpr double kSentinelAnswerSeconds = 10;
inline constexpr const char* kLastExitFile = "last-exit.json";

// The sentinel beside this binary (/proc/self/exe's directory), started watching this
// process, and a thread that reaps it (warning when it ends before the daemon). Returns
// the write end of its pipe (to pass the control endpoint to, then keep open until death),
// or nullopt with `why` set when it cannot start.
std::optional<int> spawnSentinel(const std::string& configPath, std::string& why);

// Tells the sentinel the endpoint the control socket is bound to (one line on its pipe).
void tellSentinel(int pipe, const std::string& boundControl);

// The sentinel's life (skytraind-sentinel's main): waits for the daemon `daemon` to close
// `pipe`, then judges and, on a kill for memory, answers. Returns the exit code.
int runSentinel(const DaemonConfig& config, int pipe, pid_t daemon);

// The verdict a previous daemon's sentinel left in the state dir (a kill for memory), once.
std::optional<std::string> takeLastExit(const std::string& stateDir);

// The verdict's text: "skytraind (pid P) was killed by the kernel for memory: ...".
std::string memoryKillVerdict(pid_t daemon, const std::string& cgroup, int64_t killsBefore, int64_t killsAfter,
                              double limitBytes, const std::string& limitSource, double peakBytes);

}  // namespace skytrain::daemon
