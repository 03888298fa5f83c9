#include "client/commands.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "client/format.h"
#include "client/job_printer.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/spec/job_spec.h"
#include "daemon/protocol/keys.h"
#include "daemon/protocol/printable.h"
#include "scheduler/error.h"

namespace skytrain::client {
namespace {

using protocol::Json;

constexpr int kFailed = 1;
constexpr int kRefused = 2;

constexpr int kInterrupted = 130;  // 128 + SIGINT, as a shell reports it

std::atomic<bool> interrupted{false};

extern "C" void onInterrupt(int) {
  interrupted = true;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the CLI at once
}

std::string readSpec(const std::string& path) {
  return protocol::readBoundedFile(path, protocol::kMaxSpecBytes, "job spec");
}


// What of a job's status has been printed: plans, events and evals by count (step rows are
// asked for from a step on, so the reply holds only new ones).
struct Shown {
  size_t plans = 0, events = 0, evals = 0;
};

// Prints what `status` holds past `shown`, in the order it happened to each kind.
void printNew(JobPrinter& printer, const Json& status, Shown& shown) {
  for (; shown.plans < status["plans"].size(); ++shown.plans) printer.plan(status["plans"][shown.plans], shown.plans == 0);
  for (; shown.events < status["events"].size(); ++shown.events) printer.event(status["events"][shown.events]);
  for (const auto& step : status["steps"]) printer.step(step, status["steps_total"]);
  // A restart drops the evals after its checkpoint: show only those past what was shown.
  shown.evals = std::min(shown.evals, status["evals"].size());
  for (; shown.evals < status["evals"].size(); ++shown.evals) printer.eval(status["evals"][shown.evals]);
}

// Streams a job's plans, steps, evals and events from step `shown` until it ends. A daemon
// that stops answering (restarting under systemd) is waited for up to options.reattach,
// then followed again from where the stream stopped.
int streamUntilDone(protocol::ControlClient& client, const ClientOptions& options, const std::string& job,
                    size_t shown = 0, bool interruptible = false) {
  JobPrinter printer(std::cout, outputModeFor(options.json, STDOUT_FILENO));
  Shown printed;
  auto lostSince = std::chrono::steady_clock::now();
  bool lost = false;
  if (interruptible) std::signal(SIGINT, onInterrupt);
  while (true) {
    if (interruptible && interrupted) {
      std::signal(SIGINT, SIG_DFL);
      std::cout << std::flush;
      if (options.cancelOnInterrupt) {
        try {
          const Json reply = client.request({{"type", protocol::kCancel}, {"job", job}}, options.timeout);
          std::cerr << "\ninterrupted: job " << job << " " << reply["state"].get<std::string>() << " (--cancel-on-interrupt)\n";
        } catch (const std::exception& e) {
          std::cerr << "\ninterrupted: job " << job << " NOT cancelled (" << e.what() << "); it may keep running: "
                    << "skytrain cancel " << job << "\n";
        }
      } else {
        std::cerr << "\ninterrupted: job " << job << " keeps running on the daemons.\n"
                  << "  follow it:  skytrain logs -f " << job << "\n"
                  << "  stop it:    skytrain cancel " << job << "\n"
                  << "(submit --cancel-on-interrupt cancels the job on Ctrl-C instead)\n";
      }
      return kInterrupted;
    }
    Json reply;
    try {
      reply = client.request({{"type", protocol::kStatus}, {"job", job}, {"since", shown}}, options.timeout);
      if (lost) std::cerr << "reattached to " << options.daemon << "\n";
      lost = false;
    } catch (const PeerError& e) {
      if (!lost) {
        std::cerr << "lost contact with " << options.daemon << " (" << e.what() << "); retrying\n";
        lostSince = std::chrono::steady_clock::now();
        lost = true;
      }
      if (std::chrono::steady_clock::now() - lostSince > options.reattach) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    const Json& status = reply["job"];
    printNew(printer, status, printed);
    // Steps after a restart's checkpoint are run again: follow the table as it is now.
    shown = std::min<size_t>(shown, status["steps_done"].get<size_t>()) + status["steps"].size();
    const std::string state = status["state"];
    if (state == "succeeded" || state == "failed" || state == "cancelled") {
      printer.summary(status);
      return state == "succeeded" ? 0 : kFailed;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

std::string firstOf(const std::string& flag, const char* env, const std::string& fallback) {
  if (!flag.empty()) return flag;
  if (const char* value = std::getenv(env); value && *value) return value;
  return fallback;
}

}  // namespace

int guarded(const std::function<int()>& command) {
  try {
    return command();
  } catch (const SpecError& e) {
    std::cerr << "error: job spec refused: " << e.path() << ": " << e.what() + e.path().size() + 2 << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
  }
  return kRefused;
}

protocol::ClientSecurity resolveSecurity(const IdentityOptions& identity, const std::string& daemon) {
  if (identity.insecure) {
    if (!protocol::isLoopbackEndpoint(daemon)) {
      throw Error("--insecure talks plaintext to loopback daemons only, not " + daemon);
    }
    return {};
  }
  protocol::ClientSecurity security;
  std::string keyFile = firstOf(identity.keyFile, "SKYTRAIN_KEY", "");
  const std::string fallbackKey = protocol::userConfigPath("client.key");
  if (keyFile.empty() && !fallbackKey.empty() && ::access(fallbackKey.c_str(), F_OK) == 0) keyFile = fallbackKey;
  if (keyFile.empty()) {
    throw Error("no key: give --key FILE or $SKYTRAIN_KEY, or put it at " +
                (fallbackKey.empty() ? std::string("~/.config/skytrain/client.key") : fallbackKey) +
                " (make one with `skytrain keygen client --dir " +
                (fallbackKey.empty() ? std::string("~/.config/skytrain") : fallbackKey.substr(0, fallbackKey.rfind('/'))) +
                "`), or --insecure for an insecure loopback daemon");
  }
  security.self = protocol::loadKeyPair(keyFile);
  security.serverKey = firstOf(identity.daemonKey, "SKYTRAIN_DAEMON_KEY", "");
  if (!security.serverKey.empty()) {
    security.serverKey = protocol::publicKeyArgument(security.serverKey);
  } else {
    const std::string file = firstOf(identity.knownDaemons, "SKYTRAIN_KNOWN_DAEMONS", protocol::userConfigPath("known_daemons"));
    const auto known = protocol::loadKnownDaemons(file);
    auto it = known.find(daemon);
    if (it == known.end()) {
      throw Error("no public key is known for daemon " + daemon + ": add \"" + daemon + " <its public key>\" to " +
                  (file.empty() ? std::string("a known daemons file") : file) +
                  " or give --daemon-key (an unknown daemon is never trusted on first use)");
    }
    security.serverKey = it->second;
  }
  if (!protocol::isZ85Key(security.serverKey)) throw Error("the daemon key is not a 40-character Z85 key");
  return security;
}

int keygen(const std::string& name, const std::string& dir, const std::string& role) {
  return guarded([&] {
    const auto keys = protocol::generateKeyPair(name);
    const std::string path = protocol::writeKeyPair(keys, dir);
    const std::string pub = dir + "/" + name + ".pub";
    std::cout << "wrote " << path << " (secret, mode 0600: it stays on this host) and " << pub << "\n"
              << "public key: " << keys.publicKey << "\n"
              << "to admit it, on each daemon that should (role " << role << "):\n"
              << "  skytrain authorize @" << pub << " --role " << role << " --file /etc/skytrain/authorized_keys\n";
    if (role == "daemon") {
      std::cout << "and to reach it by its control endpoint, on the other daemons and on users' machines:\n"
                << "  skytrain trust tcp://HOST:7100 @" << pub << "\n";
    }
    return 0;
  });
}

int authorize(const std::string& key, const std::string& role, std::string name, const std::string& file) {
  return guarded([&] {
    std::string fileName;
    const std::string publicKey = protocol::publicKeyArgument(key, &fileName);
    if (name.empty()) name = fileName;
    if (name.empty()) throw Error("give --name NAME: a bare key carries no name");
    const auto parsed = protocol::parseRole(role);
    if (!parsed) throw Error("role \"" + role + "\" is unknown (valid: daemon, client, admin)");
    if (!protocol::authorizeKey(file, {publicKey, *parsed, name})) {
      std::cout << file << " already admits \"" << name << "\" as " << role << "\n";
      return 0;
    }
    std::cout << "added to " << file << ": " << publicKey << " " << role << " " << name << "\n"
              << "a running daemon rereads it on SIGHUP (systemctl reload skytraind)\n";
    return 0;
  });
}

int trust(const std::string& endpoint, const std::string& key, std::string file) {
  return guarded([&] {
    if (file.empty()) file = firstOf("", "SKYTRAIN_KNOWN_DAEMONS", protocol::userConfigPath("known_daemons"));
    if (file.empty()) throw Error("no known daemons file: give --file, or set $HOME or $XDG_CONFIG_HOME");
    const std::string publicKey = protocol::publicKeyArgument(key);
    const std::string replaced = protocol::trustDaemon(file, endpoint, publicKey);
    std::cout << (replaced.empty() ? "added to " : replaced == publicKey ? "already in " : "replaced in ") << file << ": "
              << endpoint << " " << publicKey << "\n";
    if (!replaced.empty() && replaced != publicKey) std::cout << "(it was " << replaced << ")\n";
    return 0;
  });
}

int validate(const std::string& specPath) {
  return guarded([&] {
    const protocol::JobSpec spec = protocol::parseJobSpec(readSpec(specPath));
    std::cout << specPath << ": a valid job spec: \"" << protocol::printable(spec.name) << "\", " << spec.stages.size()
              << " stages, " << spec.steps << " steps (checked here only: the daemons check keys, files and memory at submit)\n";
    return 0;
  });
}

std::string resolveJob(const ClientOptions& options, const std::string& job) {
  if (job.size() == 16 && job.find_first_not_of("0123456789abcdef") == std::string::npos) return job;
  if (job.empty() || job.size() > 16 || job.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw Error("\"" + protocol::printable(job.substr(0, 32)) + "\" is not a job id (16 hex digits, or the first few of them)");
  }
  zmq::context_t context;
  protocol::ControlClient client(context, options.daemon, options.security);
  const Json reply = client.request({{"type", protocol::kList}}, options.timeout);
  std::vector<std::string> matches;
  for (const auto& j : reply["jobs"]) {
    const std::string id = j["id"];
    if (id.rfind(job, 0) == 0) matches.push_back(id);
  }
  if (matches.size() == 1) return matches[0];
  if (matches.empty()) throw Error("no job of yours on " + options.daemon + " starts with \"" + job + "\"");
  std::string list;
  for (size_t i = 0; i < matches.size() && i < 5; ++i) list += (i ? ", " : "") + matches[i];
  throw Error("\"" + job + "\" is the start of " + std::to_string(matches.size()) + " jobs (" + list +
              (matches.size() > 5 ? ", ..." : "") + "): give more of the id");
}

int submit(const ClientOptions& options, const std::string& specPath, bool detach) {
  return guarded([&] {
    zmq::context_t context;
    protocol::ControlClient client(context, options.daemon, options.security);
    const Json reply = client.request({{"type", protocol::kSubmit}, {"spec", readSpec(specPath)}}, options.timeout);
    const std::string job = reply["job"];
    // Ctrl-C is ours from here (before the line a script waits for; a background job may
    // have started with SIGINT ignored).
    if (!detach) std::signal(SIGINT, onInterrupt);
    std::cout << "submitted job " << job << " to " << options.daemon << std::endl;  // flushed: scripts wait for it
    if (detach) return 0;
    return streamUntilDone(client, options, job, 0, true);
  });
}

int plan(const ClientOptions& options, const std::string& specPath) {
  return guarded([&] {
    zmq::context_t context;
    protocol::ControlClient client(context, options.daemon, options.security);
    const std::string job = client.request({{"type", protocol::kSubmit}, {"spec", readSpec(specPath)}, {"dry_run", true}},
                                           options.timeout)["job"];
    std::cout << "profiling job " << job << " (dry run)\n";
    while (true) {
      const Json status = client.request({{"type", protocol::kStatus}, {"job", job}}, options.timeout)["job"];
      const std::string state = status["state"];
      if (state == "succeeded" && !status["plans"].empty()) {
        std::cout << formatPlan(status["plans"].back());
        return 0;
      }
      if (state == "succeeded" || state == "failed" || state == "cancelled") {
        std::cerr << "error: no plan: " << protocol::printable(status["error"].get<std::string>()) << "\n";
        return kFailed;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
}

int status(const ClientOptions& options, const std::string& job, bool json) {
  return guarded([&] {
    zmq::context_t context;
    protocol::ControlClient client(context, options.daemon, options.security);
    const Json reply = client.request({{"type", protocol::kStatus}, {"job", job}, {"since", 0}}, options.timeout);
    const Json& status = reply["job"];
    if (json) {
      std::cout << status.dump(2) << "\n";
      return 0;
    }
    std::cout << "job " << status["id"].get<std::string>() << " \"" << protocol::printable(status["name"].get<std::string>()) << "\": "
              << status["state"].get<std::string>() << ", step " << status["steps_done"] << "/"
              << status["steps_total"] << ", " << status["stages"] << " stages, " << status["schedule"].get<std::string>()
              << " m=" << status["micro_batches"] << "\n";
    if (!status["steps"].empty()) std::cout << "  last: " << formatStep(status["steps"].back(), status["steps_total"]) << "\n";
    const Json& plans = status["plans"];
    for (size_t i = 0; i + 1 < plans.size(); ++i) {  // earlier plans in a line each, the one in force whole
      std::cout << "  plan from step " << plans[i]["from_step"] << ": m=" << plans[i]["micro_batches"] << " "
                << plans[i]["schedule"].get<std::string>() << " (" << plans[i]["reason"].get<std::string>() << ")\n";
    }
    if (!plans.empty()) std::cout << "plan in force:\n" << formatPlan(plans.back());
    for (const auto& event : status["events"]) std::cout << formatEvent(event) << "\n";
    std::cout << formatSummary(status);
    return 0;
  });
}

int list(const ClientOptions& options, const ListOptions& listOptions) {
  return guarded([&] {
    zmq::context_t context;
    protocol::ControlClient client(context, options.daemon, options.security);
    const Json reply = client.request({{"type", protocol::kList}}, options.timeout);
    std::vector<Json> jobs;
    for (const auto& job : reply["jobs"]) {
      if (!listOptions.state.empty() && job.value("state", "") != listOptions.state) continue;
      jobs.push_back(job);
    }
    // Newest first, as `docker ps` and `squeue` users expect to read them.
    std::stable_sort(jobs.begin(), jobs.end(), [](const Json& a, const Json& b) {
      return a.value("created_at", 0.0) > b.value("created_at", 0.0);
    });
    if (listOptions.json) {
      std::cout << Json(jobs).dump(2) << "\n";
      return 0;
    }
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    std::printf("%-16s  %-10s  %-11s  %-8s  %s\n", "JOB", "STATE", "STEP", "AGE", "NAME");
    for (const auto& job : jobs) {
      const std::string step = std::to_string(job["steps_done"].get<int>()) + "/" + std::to_string(job["steps_total"].get<int>());
      std::printf("%-16s  %-10s  %-11s  %-8s  %s\n", job["id"].get<std::string>().c_str(),
                  job["state"].get<std::string>().c_str(), step.c_str(),
                  formatAge(now - job.value("created_at", now)).c_str(),
                  protocol::printable(job["name"].get<std::string>()).c_str());
    }
    return 0;
  });
}

int logs(const ClientOptions& options, const std::string& job, bool follow) {
  return guarded([&] {
    zmq::context_t context;
    protocol::ControlClient client(context, options.daemon, options.security);
    if (follow) return streamUntilDone(client, options, job);
    const Json status = client.request({{"type", protocol::kStatus}, {"job", job}, {"since", 0}}, options.timeout)["job"];
    // What happened so far, as lines (never a bar: nothing is followed).
    JobPrinter printer(std::cout, options.json ? OutputMode::Json : OutputMode::Lines);
    Shown none;
    printNew(printer, status, none);
    return 0;
  });
}

int resume(const ClientOptions& options, const std::string& job, bool detach) {
  return guarded([&] {
    zmq::context_t context;
    protocol::ControlClient client(context, options.daemon, options.security);
    const Json reply = client.request({{"type", "resume"}, {"job", job}}, options.timeout);
    if (!detach) std::signal(SIGINT, onInterrupt);
    if (reply["from_step"].get<int64_t>() > 0) {
      std::cout << "resuming job " << job << " after step " << reply["from_step"] << " (its last complete checkpoint)\n";
    } else {
      std::cout << "resuming job " << job << " after step 0: from the start (it has no complete checkpoint)\n";
    }
    if (detach) return 0;
    return streamUntilDone(client, options, job, reply["from_step"].get<size_t>(), true);
  });
}

int cancel(const ClientOptions& options, const std::string& job) {
  return guarded([&] {
    zmq::context_t context;
    protocol::ControlClient client(context, options.daemon, options.security);
    const Json reply = client.request({{"type", protocol::kCancel}, {"job", job}}, options.timeout);
    std::cout << "job " << job << ": " << reply["state"].get<std::string>() << "\n";
    return 0;
  });
}

}  // namespace skytrain::client
