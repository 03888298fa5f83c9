// skytrain: the command-line client of skytraind.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>

#include "client/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"skytrain: submit and manage training jobs on skytraind daemons"};
  app.require_subcommand(1);
  skytrain::client::ClientOptions options;
  if (const char* env = std::getenv("SKYTRAIN_DAEMON")) options.daemon = env;
  int timeoutMs = 5000;
  skytrain::client::IdentityOptions identity;
  app.add_option("-k,--key", identity.keyFile, "your secret key file (env SKYTRAIN_KEY; default ~/.config/skytrain/client.key)");
  app.add_option("--daemon-key", identity.daemonKey, "the daemon's public key (env SKYTRAIN_DAEMON_KEY; default: known daemons)");
  app.add_option("--known-daemons", identity.knownDaemons,
                 "file of \"<endpoint> <public key>\" lines (env SKYTRAIN_KNOWN_DAEMONS; default ~/.config/skytrain/known_daemons)");
  app.add_flag("--insecure", identity.insecure, "plaintext, no keys: for an insecure daemon on loopback");
  app.add_option("-d,--daemon", options.daemon, "control endpoint of the daemon (env SKYTRAIN_DAEMON)")
      ->capture_default_str();
  app.add_option("--timeout-ms", timeoutMs, "per-request timeout")->capture_default_str()->check(CLI::Range(1, 3600000));

  std::string spec, job;
  bool detach = false, json = false;
  auto* submit = app.add_subcommand("submit", "submit a job spec; streams progress until it ends");
  submit->add_option("spec", spec, "job spec (JSON file)")->required();
  submit->add_flag("--detach", detach, "return once the job is accepted");
  auto* status = app.add_subcommand("status", "show a job's state and metrics");
  status->add_option("job", job, "job id")->required();
  status->add_flag("--json", json, "print the full status as JSON");
  auto* plan = app.add_subcommand("plan", "dry run: profile the stages and links, print the plan, train nothing");
  plan->add_option("spec", spec, "job spec (JSON file)")->required();
  auto* list = app.add_subcommand("list", "list the jobs this daemon coordinates");
  auto* cancel = app.add_subcommand("cancel", "cancel a job (idempotent)");
  cancel->add_option("job", job, "job id")->required();
  bool follow = false;
  auto* logs = app.add_subcommand("logs", "print a job's steps and events; -f follows it to the end");
  logs->add_option("job", job, "job id")->required();
  logs->add_flag("-f,--follow", follow, "stream until the job ends (re-attaches after a daemon restart)");
  auto* resume = app.add_subcommand("resume", "restart a failed or cancelled job from its last complete checkpoint");
  resume->add_option("job", job, "job id")->required();
  resume->add_flag("--detach", detach, "return once the job is resumed");
  std::string keyName, keyDir = ".";
  auto* keygen = app.add_subcommand("keygen", "write a CURVE key pair: NAME.key (secret, mode 0600) and NAME.pub");
  keygen->add_option("name", keyName, "key name (A-Z a-z 0-9 . _ -)")->required();
  keygen->add_option("--dir", keyDir, "where to write the files")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  options.timeout = std::chrono::milliseconds(timeoutMs);

  namespace client = skytrain::client;
  if (*keygen) return client::keygen(keyName, keyDir);
  try {
    options.security = client::resolveSecurity(identity, options.daemon);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  if (*submit) return client::submit(options, spec, detach);
  if (*status) return client::status(options, job, json);
  if (*plan) return client::plan(options, spec);
  if (*list) return client::list(options);
  if (*cancel) return client::cancel(options, job);
  if (*logs) return client::logs(options, job, follow);
  if (*resume) return client::resume(options, job, detach);
  return 2;
}
