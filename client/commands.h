// The skytrain CLI's commands. Each returns the process exit code; output goes to
// stdout, errors to stderr.
#pragma once

#include <chrono>
#include <string>

namespace skytrain::client {

struct ClientOptions {
  std::string daemon = "tcp://127.0.0.1:7100";  // control endpoint
  std::chrono::milliseconds timeout{5000};       // per request
};

// Submits the spec file; unless detach, streams one line per step and a summary, and
// returns 0 when the job succeeds, 1 when it fails or is cancelled, 2 on a refused spec
// or an unreachable daemon.
int submit(const ClientOptions& options, const std::string& specPath, bool detach);
int status(const ClientOptions& options, const std::string& job, bool json);
// Dry run: the daemons build the stages and profile them, the coordinator prints the plan's
// table, nothing trains. Returns 0 when a plan was made.
int plan(const ClientOptions& options, const std::string& specPath);
int list(const ClientOptions& options);
int cancel(const ClientOptions& options, const std::string& job);

}  // namespace skytrain::client
