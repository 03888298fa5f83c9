#include "client/commands.h"

#include <unistd.h>

#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "client/format.h"
#include "client/job_printer.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/printable.h"
#include "scheduler/error.h"

namespace skytrain::client {
namespace {

using protocol::Json;

constexpr int kFailed = 1;
constexpr int kRefused = 2;

std::string readSpec(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read job spec \"" + path + "\"");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
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
                    size_t shown = 0) {
  JobPrinter printer(std::cout, outputModeFor(options.json, STDOUT_FILENO));
  Shown printed;
  auto lostSince = std::chrono::steady_clock::now();
  bool lost = false;
  while (true) {
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

std::string homeConfig(const std::string& file) {
  const char* home = std::getenv("HOME");
  return home ? std::string(home) + "/.config/skytrain/" + file : "";
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
  if (keyFile.empty()) {
    const std::string fallback = homeConfig("client.key");
    if (!fallback.empty() && ::access(fallback.c_str(), F_OK) == 0) keyFile = fallback;
  }
  if (keyFile.empty()) {
    throw Error("no key: give --key FILE or $SKYTRAIN_KEY (make one with `skytrain keygen NAME`), or --insecure "
                "for an insecure loopback daemon");
  }
  security.self = protocol::loadKeyPair(keyFile);
  security.serverKey = firstOf(identity.daemonKey, "SKYTRAIN_DAEMON_KEY", "");
  if (security.serverKey.empty()) {
    const std::string file = firstOf(identity.knownDaemons, "SKYTRAIN_KNOWN_DAEMONS", homeConfig("known_daemons"));
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

int keygen(const std::string& name, const std::string& dir) {
  return guarded([&] {
    const auto keys = protocol::generateKeyPair(name);
    const std::string path = protocol::writeKeyPair(keys, dir);
    std::cout << "wrote " << path << " (secret, mode 0600) and " << dir << "/" << name << ".pub\n"
              << "public key: " << keys.publicKey << "\n"
              << "authorized_keys line for a daemon that admits it: " << keys.publicKey << " client " << name << "\n";
    return 0;
  });
}

int submit(const ClientOptions& options, const std::string& specPath, bool detach) {
  return guarded([&] {
    zmq::context_t context;
    protocol::ControlClient client(context, options.daemon, options.security);
    const Json reply = client.request({{"type", protocol::kSubmit}, {"spec", readSpec(specPath)}}, options.timeout);
    const std::string job = reply["job"];
    std::cout << "submitted job " << job << " to " << options.daemon << "\n";
    if (detach) return 0;
    return streamUntilDone(client, options, job);
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

int list(const ClientOptions& options) {
  return guarded([&] {
    zmq::context_t context;
    protocol::ControlClient client(context, options.daemon, options.security);
    const Json reply = client.request({{"type", protocol::kList}}, options.timeout);
    std::printf("%-16s  %-10s  %-9s  %s\n", "JOB", "STATE", "STEP", "NAME");
    for (const auto& job : reply["jobs"]) {
      const std::string step = std::to_string(job["steps_done"].get<int>()) + "/" + std::to_string(job["steps_total"].get<int>());
      std::printf("%-16s  %-10s  %-9s  %s\n", job["id"].get<std::string>().c_str(),
                  job["state"].get<std::string>().c_str(), step.c_str(), protocol::printable(job["name"].get<std::string>()).c_str());
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
    std::cout << "resuming job " << job << " from step " << reply["from_step"] << "\n";
    if (detach) return 0;
    return streamUntilDone(client, options, job, reply["from_step"].get<size_t>());
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
