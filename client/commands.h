// The skytrain CLI's commands. Each returns the process exit code; output goes to
// stdout, errors to stderr.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "daemon/protocol/control.h"

namespace skytrain::client {

struct ClientOptions {
  std::string daemon = "tcp://127.0.0.1:7100";  // control endpoint
  std::chrono::milliseconds timeout{5000};       // per request
  std::chrono::seconds reattach{300};            // how long a waiting command waits for a silent daemon
  protocol::ClientSecurity security;             // from resolveSecurity
  bool json = false;                             // --json: JSON lines instead of text
  bool cancelOnInterrupt = false;                // submit/resume: Ctrl-C cancels the job (else it detaches)
};

struct ListOptions {
  bool json = false;
  std::string state;  // only jobs in this state ("" = all)
};

// Where the CLI's identity comes from: flags, else the environment, else ~/.config/skytrain.
struct IdentityOptions {
  std::string keyFile;       // --key, $SKYTRAIN_KEY, ~/.config/skytrain/client.key
  std::string daemonKey;     // --daemon-key, $SKYTRAIN_DAEMON_KEY
  std::string knownDaemons;  // --known-daemons, $SKYTRAIN_KNOWN_DAEMONS, ~/.config/skytrain/known_daemons
  bool insecure = false;     // --insecure: plaintext, for an insecure loopback daemon
};

// Runs a command's body and returns its exit code; an exception is printed as "error: ..."
// (a refused spec with the JSON path of the bad field) and exits 2.
int guarded(const std::function<int()>& command);

// The client's key pair and the daemon's public key. Throws skytrain::Error saying what
// is missing; an unknown daemon key is an error, never trusted on first use.
protocol::ClientSecurity resolveSecurity(const IdentityOptions& identity, const std::string& daemon);

// Writes DIR/NAME.key and DIR/NAME.pub (making DIR, mode 0700) and prints the commands that
// admit the key with `role` and, for a daemon's key, that trust it by endpoint.
int keygen(const std::string& name, const std::string& dir, const std::string& role);
// Adds "<key> <role> <name>" to an authorized_keys file. key: a Z85 key, @FILE or a .pub path.
int authorize(const std::string& key, const std::string& role, std::string name, const std::string& file);
// Sets "<endpoint> <key>" in a known_daemons file (default: the CLI's own).
int trust(const std::string& endpoint, const std::string& key, std::string file);
// Checks a job spec offline, with the daemons' own parser.
int validate(const std::string& specPath);
// A job id from an id or a unique prefix of one of the caller's jobs; throws skytrain::Error.
std::string resolveJob(const ClientOptions& options, const std::string& job);

// Submits the spec file; unless detach, streams one line per step and a summary, and
// returns 0 when the job succeeds, 1 when it fails or is cancelled, 2 on a refused spec
// or an unreachable daemon.
int submit(const ClientOptions& options, const std::string& specPath, bool detach);
int status(const ClientOptions& options, const std::string& job, bool json);
// Dry run: the daemons build the stages and profile them, the coordinator prints the plan's
// table, nothing trains. Returns 0 when a plan was made.
int plan(const ClientOptions& options, const std::string& specPath);
int list(const ClientOptions& options, const ListOptions& listOptions);
int cancel(const ClientOptions& options, const std::string& job);
// The job's steps and events so far; with follow, streams until it ends (re-attaching to a
// daemon that restarts).
int logs(const ClientOptions& options, const std::string& job, bool follow);
// Restarts a failed or cancelled job from its last complete checkpoint.
int resume(const ClientOptions& options, const std::string& job, bool detach);

}  // namespace skytrain::client
