#include "daemon/daemon.h"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <zmq_addon.hpp>

#include <type_traits>
#include <vector>

#include "compression/codec_registry.h"
#include "daemon/coordinator/coordinator.h"
#include "daemon/jobs/job_collector.h"
#include "daemon/jobs/job_table.h"
#include "daemon/net/data_router.h"
#include "daemon/net/refusal_metrics.h"
#include "daemon/net/zap_handler.h"
#include "daemon/ops/files.h"
#include "daemon/ops/logging.h"
#include "daemon/ops/memory_limit.h"
#include "daemon/ops/metrics/metrics_server.h"
#include "daemon/stage/stage_host.h"
#include "daemon/stage/weight_export.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

using protocol::Json;

// Refuses codec names the registry does not know, with the spec path.
void checkCodecs(const protocol::JobSpec& spec) {
  const std::pair<const char*, std::string> fields[] = {{"$.compression.forward", spec.compression.forward},
                                                        {"$.compression.backward", spec.compression.backward},
                                                        {"$.compression.warmup", spec.compression.warmup}};
  auto check = [](const std::string& path, const std::string& codec) {
    try {
      compression::builtinCodecs().make(codec);
    } catch (const Error& e) {
      throw SpecError(path, e.what());
    }
  };
  for (const auto& [path, codec] : fields) {
    if (codec != "auto") check(path, codec);
  }
  const auto& c = spec.compression;
  for (const auto& [key, list] : {std::pair{"allowed", &c.allowed}, std::pair{"allowed_forward", &c.allowedForward},
                                  std::pair{"allowed_backward", &c.allowedBackward}}) {
    for (size_t i = 0; i < list->size(); ++i) {
      check(std::string("$.compression.") + key + "[" + std::to_string(i) + "]", (*list)[i]);
    }
  }
}

// Why a key may not make a request: which key, its name and role here, and the role needed.
std::string roleProblem(const Caller& caller, const std::string& needed) {
  return "the key " + caller.key.substr(0, 8) + "... is in this daemon's authorized_keys as '" + caller.name +
         "' with role " + protocol::toString(caller.role) + "; this request needs role " + needed +
         " (a daemon's own key must be listed as \"<key> daemon <name>\": skytrain authorize --role daemon)";
}

}  // namespace

MemoryBudget memoryBudget(const DaemonConfig& config) {
  if (config.memoryBudgetMb > 0) return {config.memoryBudgetMb * 1024.0 * 1024.0, "memory_budget_mb"};
  const MemoryLimit limit = memoryLimit();
  return {limit.bytes, limit.source};
}

std::string advertisedEndpoint(const std::string& bound, const std::string& host) {
  const auto scheme = bound.find("://");
  const auto colon = bound.rfind(':');
  if (scheme == std::string::npos || colon == std::string::npos || colon <= scheme + 3) return bound;
  const std::string boundHost = bound.substr(scheme + 3, colon - scheme - 3);
  if (boundHost != "0.0.0.0" && boundHost != "*" && boundHost != "[::]") return bound;
  std::string name = host;
  if (name.empty()) {
    char buffer[256] = {};
    ::gethostname(buffer, sizeof buffer - 1);
    name = buffer;
  }
  return bound.substr(0, scheme + 3) + name + bound.substr(colon);
}

Daemon::Daemon(DaemonConfig config)
    : config_(std::move(config)), context_(1), control_(context_, zmq::socket_type::router) {
  if (config_.insecure) {
    access_ = std::make_unique<AccessList>();
    spdlog::warn("skytraind: INSECURE mode: no encryption, no authentication (loopback only)");
  } else {
    access_ = std::make_unique<AccessList>(config_.authorizedKeys, protocol::loadKeyPair(config_.secretKeyFile));
    zap_ = std::make_unique<ZapHandler>(context_, *access_, counters_);
    applyCurveServer(control_, access_->self());
  }
  control_.set(zmq::sockopt::linger, 0);
  control_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(protocol::kControlSocketLimit));
  try {
    control_.bind(config_.controlEndpoint);
  } catch (const zmq::error_t& e) {
    throw Error("cannot bind control endpoint \"" + config_.controlEndpoint + "\": " + e.what());
  }
  boundControl_ = control_.get(zmq::sockopt::last_endpoint);
  controlEndpoint_ = advertisedEndpoint(boundControl_, config_.advertiseHost);
  router_ = std::make_unique<DataRouter>(context_, config_.dataEndpoint, *access_, counters_,
                                         config_.maxFrameMb * 1024 * 1024);
  dataEndpoint_ = config_.advertiseDataEndpoint.empty() ? advertisedEndpoint(router_->boundEndpoint(), config_.advertiseHost)
                                                        : config_.advertiseDataEndpoint;
  jobs_ = std::make_unique<JobTable>(config_.stateDir, access_->self().publicKey);
  unfinished_ = jobs_->load();
  StageHostOptions hostOptions;
  hostOptions.stateDir = config_.stateDir;
  hostOptions.dataEndpoint = dataEndpoint_;
  const MemoryBudget budget = memoryBudget(config_);
  hostOptions.memoryBudgetBytes = budget.bytes;
  hostOptions.memoryBudgetSource = budget.source;
  hostOptions.dataRoots = config_.dataRoots;
  hostOptions.prepareTimeoutS = config_.prepareTimeoutS;
  hostOptions.privateAddress = config_.privateAddress;
  hostOptions.self = access_->self();
  stages_ = std::make_unique<StageHost>(context_, *router_, std::move(hostOptions));
  if (!config_.metricsAddress.empty()) {
    // Jobs, then refusals; the server adds the process's own family last.
    metrics_ = std::make_unique<MetricsServer>(
        config_.metricsAddress, std::vector<std::shared_ptr<prometheus::Collectable>>{
                                    std::make_shared<JobCollector>(*jobs_, config_.metricsRetentionS), std::make_shared<RefusalCollector>(counters_)});
  }
  Json endpoints = {{"control", controlEndpoint_}, {"data", dataEndpoint_}, {"pid", ::getpid()}};
  if (metrics_) endpoints["metrics_port"] = metrics_->port();
  if (!config_.insecure) endpoints["public_key"] = access_->self().publicKey;
  writeFileAtomic(config_.stateDir + "/endpoints.json", endpoints.dump());
  router_->start();
  spdlog::info("skytraind: control {} data {} metrics {} state {}{}", controlEndpoint_, dataEndpoint_,
               metrics_ ? config_.metricsAddress.substr(0, config_.metricsAddress.rfind(':') + 1) + std::to_string(metrics_->port())
                        : std::string("off"),
               config_.stateDir,
               config_.insecure ? " (insecure)" : ", CURVE key " + access_->self().publicKey);
  spdlog::info("skytraind: memory budget {:.0f} MB a stage ({})", budget.bytes / (1024.0 * 1024.0), budget.source);
}

Daemon::~Daemon() {
  metrics_.reset();       // no scrape reads the table past here
  coordinators_.clear();  // each stops and joins
  stages_.reset();        // aborts and joins hosted stages
  router_->stop();
}

int Daemon::metricsPort() const { return metrics_ ? metrics_->port() : 0; }

std::optional<std::string> Daemon::answer(const zmq::message_t& body) {
  std::optional<uint64_t> id;
  bool oneWay = false;
  Json reply;
  try {
    const Json message = protocol::parseControlMessage(body.data(), body.size());
    oneWay = message.contains("type") && message["type"] == protocol::kStageReport;
    if (auto it = message.find("id"); it != message.end() && it->is_number_unsigned()) id = it->get<uint64_t>();
    const auto caller = access_->find(userIdOf(body));
    if (!caller) {  // admitted at the handshake, removed from authorized_keys since
      ++counters_.requestsRefused;
      throw Error("key " + userIdOf(body) + " is no longer authorized");
    }
    const protocol::Envelope envelope = protocol::parseRequest(message);
    id = envelope.id;
    // The log lines while it is answered carry who asked, and the stage a stage request names.
    LogFields fields;
    fields.peer = caller->name;
    std::visit(
        [&](const auto& m) {
          if constexpr (std::is_base_of_v<protocol::StageRef, std::decay_t<decltype(m)>>) {
            fields.job = m.job;
            fields.stage = m.stage;
            fields.replica = m.replica;
          }
        },
        envelope.request);
    LogScope logFields(std::move(fields));
    try {
      reply = handle(envelope.request, *caller);
    } catch (const Refusal& e) {
      ++(std::holds_alternative<protocol::StageReport>(envelope.request) ? counters_.reportsRefused
                                                                          : counters_.requestsRefused);
      refusals_.warn(caller->describe() + " " + protocol::typeName(envelope.request) + ": " + e.what());
      throw Error(std::string("refused: ") + e.what());
    }
  } catch (const SpecError& e) {
    reply = protocol::errorReply(e.what(), e.path());
  } catch (const StageFreed& e) {
    reply = protocol::errorReply(e.what());
    reply["freed"] = e.why();
  } catch (const std::exception& e) {
    reply = protocol::errorReply(e.what());
  }
  if (oneWay) {  // one-way: never answered, not even with an error
    if (reply.is_object() && reply.contains("error")) reportRefusals_.warn(protocol::toText(reply["error"]));
    return std::nullopt;
  }
  if (id) reply["id"] = *id;
  return protocol::toText(reply);
}

void Daemon::run() {
  for (const auto& id : unfinished_) {
    jobs_->addEvent(id, "the coordinating daemon restarted; resuming");
    coordinate(id, /*resume=*/true);
  }
  unfinished_.clear();
  auto lastBeat = std::chrono::steady_clock::now() - std::chrono::seconds(10);
  while (!stopping_) {
    if (protocol::waitReadable(control_, std::chrono::milliseconds(100))) {
      std::vector<zmq::message_t> parts;
      if (zmq::recv_multipart(control_, std::back_inserter(parts), zmq::recv_flags::dontwait) && parts.size() == 2) {
        if (const auto reply = answer(parts[1])) {
          control_.send(parts[0], zmq::send_flags::sndmore);
          control_.send(zmq::buffer(*reply), zmq::send_flags::dontwait);
        }
      } else if (!parts.empty()) {
        reportRefusals_.warn("a message of " + std::to_string(parts.size()) + " parts, dropped");
      }
    } else {
      refusals_.flush();
      reportRefusals_.flush();
    }
    if (reloadRequested_.exchange(false)) access_->reload();  // known_daemons is read at each submit
    stages_->reap();
    reapCoordinators();
    if (heartbeat_ && std::chrono::steady_clock::now() - lastBeat > std::chrono::seconds(1)) {
      heartbeat_();
      lastBeat = std::chrono::steady_clock::now();
    }
  }
  spdlog::info("skytraind: stopping ({} coordinated jobs, {} hosted stages active)", coordinators_.size(),
               stages_->active());
  for (auto& entry : coordinators_) entry.second->stop();
  coordinators_.clear();
}

void Daemon::reapCoordinators() {
  for (auto it = coordinators_.begin(); it != coordinators_.end();) {
    it = it->second->finished() ? coordinators_.erase(it) : std::next(it);
  }
}

void Daemon::refuse(const std::string& what) { throw Refusal(what); }

void Daemon::checkOwner(const std::string& job, const Caller& caller, const char* action) {
  const auto owner = jobs_->owner(job);
  if (caller.isAdmin() || owner.first == caller.key) return;
  refuse(std::string(action) + " job " + job + " needs the admin role: it belongs to '" + owner.second + "'");
}

Json Daemon::ping(const Caller& caller) const {
  Json reply = {{"ok", true}, {"control", controlEndpoint_}, {"data", dataEndpoint_}, {"you", caller.describe()}};
  if (!config_.insecure) reply["public_key"] = access_->self().publicKey;
  if (caller.isAdmin()) {
    reply["hosted_stages"] = stages_->active();
    reply["refused"] = {{"handshakes", counters_.handshakesRefused.load()},
                        {"requests", counters_.requestsRefused.load()},
                        {"reports", counters_.reportsRefused.load()},
                        {"frames", counters_.framesRefused.load() + router_->framesDropped()}};
  }
  return reply;
}

void Daemon::report(const protocol::StageReport& report, const Caller& caller) {
  checkStageSender(report, caller, "stage report");
  jobs_->applyReport(report);
}

void Daemon::checkStageSender(const protocol::StageRef& ref, const Caller& caller, const std::string& what) const {
  const std::string expected = jobs_->stageKey(ref.job, ref.stage, ref.replica);
  if (!caller.isDaemon() || (!caller.insecure && caller.key != expected)) {
    throw Refusal(what + " for job " + ref.job + " stage " + std::to_string(ref.stage) +
                  (ref.replica > 0 ? " replica " + std::to_string(ref.replica) : std::string()) + " from " +
                  caller.describe() + ", which does not host that stage");
  }
}

Json Daemon::handle(const protocol::Request& request, const Caller& caller) {
  using namespace protocol;
  if (std::holds_alternative<Ping>(request)) return ping(caller);
  if (const auto* m = std::get_if<StageReport>(&request)) {
    report(*m, caller);
    return nullptr;
  }
  const bool stageRequest = std::holds_alternative<StagePrepare>(request) || std::holds_alternative<StageStart>(request) ||
                            std::holds_alternative<StageAbort>(request) || std::holds_alternative<StagePlan>(request) ||
                            std::holds_alternative<StageProfile>(request) ||
                            std::holds_alternative<StageHeartbeat>(request) || std::holds_alternative<StageCommit>(request);
  if (stageRequest && !caller.isDaemon()) refuse(typeName(request) + " is for daemons: " + roleProblem(caller, "daemon"));
  if (const auto* m = std::get_if<StagePrepare>(&request)) return stages_->prepare(*m, caller.key);
  if (const auto* m = std::get_if<StageStart>(&request)) return stages_->start(*m, caller.key);
  if (const auto* m = std::get_if<StageAbort>(&request)) return stages_->abort(*m, caller.key);
  if (const auto* m = std::get_if<StagePlan>(&request)) return stages_->plan(*m, caller.key);
  if (const auto* m = std::get_if<StageProfile>(&request)) return stages_->profile(*m, caller.key);
  if (const auto* m = std::get_if<StageHeartbeat>(&request)) return stages_->heartbeat(*m, caller.key);
  if (const auto* m = std::get_if<StageCommit>(&request)) return stages_->commit(*m, caller.key);
  if (const auto* m = std::get_if<StoreRequest>(&request)) {
    checkStageSender(*m, caller, "rendezvous store request");
    return jobs_->store(*m);
  }
  if (!caller.isUser()) refuse(typeName(request) + " is for clients: " + roleProblem(caller, "client or admin"));
  if (const auto* m = std::get_if<Submit>(&request)) return submit(*m, caller);
  if (const auto* m = std::get_if<Status>(&request)) {
    checkOwner(m->job, caller, "reading");
    return {{"ok", true}, {"job", jobs_->status(m->job, static_cast<size_t>(m->since))}};
  }
  if (std::holds_alternative<List>(request)) {
    return {{"ok", true}, {"jobs", jobs_->list(caller.isAdmin() ? std::nullopt : std::optional(caller.key))}};
  }
  if (const auto* m = std::get_if<Cancel>(&request)) return cancel(*m, caller);
  if (const auto* m = std::get_if<Resume>(&request)) return resume(*m, caller);
  if (const auto* m = std::get_if<ExportRead>(&request)) return readExportChunk(config_.stateDir, *m, caller);
  throw Error("unhandled request type \"" + typeName(request) + "\"");
}

std::vector<std::string> Daemon::stageKeys(const protocol::JobSpec& spec) const {
  std::vector<std::string> keys;
  // Read at each submit (it is small and bounded), so a new daemon needs no restart here.
  protocol::KnownDaemons known;
  if (!config_.insecure) {
    try {
      known = protocol::loadKnownDaemons(config_.knownDaemons);
    } catch (const std::exception& e) {
      throw Error(std::string("this daemon's known daemons: ") + e.what());
    }
  }
  for (int slot = 0; slot < protocol::slotCount(spec); ++slot) {
    const protocol::Placement stage = protocol::placementOf(spec, slot);
    const int i = protocol::stageOfSlot(spec, slot), replica = protocol::replicaOfSlot(spec, slot);
    if (config_.insecure) {
      keys.emplace_back();
    } else if (!stage.key.empty()) {
      keys.push_back(stage.key);
    } else if (auto it = known.find(stage.daemon); it != known.end()) {
      keys.push_back(it->second);
    } else if (stage.daemon == controlEndpoint_) {
      keys.push_back(access_->self().publicKey);
    } else {
      throw SpecError("$.stages[" + std::to_string(i) + "]" +
                          (replica > 0 ? ".replicas[" + std::to_string(replica - 1) + "]" : std::string()) + ".key",
                      "no public key is known for daemon " + stage.daemon + ": give it here or list it in " +
                          (config_.knownDaemons.empty() ? std::string("known_daemons (not configured)") : config_.knownDaemons));
    }
  }
  return keys;
}

Json Daemon::submit(const protocol::Submit& request, const Caller& caller) {
  const protocol::JobSpec spec = protocol::parseJobSpec(request.spec);
  checkCodecs(spec);
  const auto keys = stageKeys(spec);
  const std::string id = jobs_->create(spec, request.spec, {caller.key, caller.name}, keys, request.dryRun);
  coordinate(id, /*resume=*/false);
  spdlog::info("job {} (\"{}\"): submitted by {}, {} stages, {} steps", id, spec.name, caller.describe(),
               spec.stages.size(), spec.steps);
  return {{"ok", true}, {"job", id}};
}

void Daemon::coordinate(const std::string& id, bool resume) {
  auto [text, keys] = jobs_->launchInfo(id);
  CoordinatorOptions options{controlEndpoint_, access_->self(), std::move(keys)};
  coordinators_[id] = std::make_unique<Coordinator>(context_, *jobs_, id, protocol::parseJobSpec(text), text,
                                                    std::move(options), resume);
}

Json Daemon::resume(const protocol::Resume& request, const Caller& caller) {
  checkOwner(request.job, caller, "resuming");
  reapCoordinators();
  if (coordinators_.count(request.job)) throw Error("job " + request.job + " is still being coordinated");
  if (!jobs_->reopen(request.job, "resumed by " + caller.describe())) {
    const JobState state = jobs_->state(request.job);
    throw Error("job " + request.job + (state == JobState::Succeeded ? " has succeeded" : " is " + toString(state)) +
                ": only a failed or cancelled job resumes");
  }
  coordinate(request.job, /*resume=*/true);
  return {{"ok", true}, {"job", request.job}, {"from_step", jobs_->progress(request.job).lastCheckpoint + 1}};
}

Json Daemon::cancel(const protocol::Cancel& request, const Caller& caller) {
  checkOwner(request.job, caller, "cancelling");
  if (jobs_->transition(request.job, JobState::Cancelled, "cancelled by " + caller.describe())) {
    spdlog::info("job {}: cancel requested by {}", request.job, caller.describe());
  }
  return {{"ok", true}, {"state", toString(jobs_->state(request.job))}};
}

}  // namespace skytrain::daemon
