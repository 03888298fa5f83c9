#include "daemon/daemon.h"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <zmq_addon.hpp>

#include <vector>

#include "compression/codec_registry.h"
#include "daemon/coordinator.h"
#include "daemon/data_router.h"
#include "daemon/files.h"
#include "daemon/job_table.h"
#include "daemon/stage_host.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

using protocol::Json;

// Refuses codec names the registry does not know, with the spec path.
void checkCodecs(const protocol::JobSpec& spec) {
  const std::pair<const char*, std::string> fields[] = {{"$.compression.forward", spec.compression.forward},
                                                        {"$.compression.backward", spec.compression.backward},
                                                        {"$.compression.warmup", spec.compression.warmup}};
  for (const auto& [path, codec] : fields) {
    try {
      compression::builtinCodecs().make(codec);
    } catch (const Error& e) {
      throw SpecError(path, e.what());
    }
  }
}

}  // namespace

double memoryBudgetBytes(const DaemonConfig& config) {
  if (config.memoryBudgetMb > 0) return config.memoryBudgetMb * 1024.0 * 1024.0;
  const double physical = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  return physical / 2;
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
  control_.set(zmq::sockopt::linger, 0);
  control_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(protocol::kMaxControlMessageBytes));
  try {
    control_.bind(config_.controlEndpoint);
  } catch (const zmq::error_t& e) {
    throw Error("cannot bind control endpoint \"" + config_.controlEndpoint + "\": " + e.what());
  }
  controlEndpoint_ = advertisedEndpoint(control_.get(zmq::sockopt::last_endpoint), config_.advertiseHost);
  router_ = std::make_unique<DataRouter>(context_, config_.dataEndpoint);
  dataEndpoint_ = config_.advertiseDataEndpoint.empty() ? advertisedEndpoint(router_->boundEndpoint(), config_.advertiseHost)
                                                        : config_.advertiseDataEndpoint;
  jobs_ = std::make_unique<JobTable>(config_.stateDir);
  jobs_->load();
  stages_ = std::make_unique<StageHost>(context_, *router_, config_.stateDir, dataEndpoint_, memoryBudgetBytes(config_));
  writeFileAtomic(config_.stateDir + "/endpoints.json",
                  Json{{"control", controlEndpoint_}, {"data", dataEndpoint_}, {"pid", ::getpid()}}.dump());
  router_->start();
  spdlog::info("skytraind: control {} data {} state {}", controlEndpoint_, dataEndpoint_, config_.stateDir);
}

Daemon::~Daemon() {
  coordinators_.clear();  // each stops and joins
  stages_.reset();        // aborts and joins hosted stages
  router_->stop();
}

void Daemon::run() {
  while (!stopping_) {
    if (protocol::waitReadable(control_, std::chrono::milliseconds(100))) {
      std::vector<zmq::message_t> parts;
      if (zmq::recv_multipart(control_, std::back_inserter(parts), zmq::recv_flags::dontwait) && parts.size() == 2) {
        Json request, reply;
        try {
          request = protocol::parseControlMessage(parts[1].data(), parts[1].size());
          reply = handle(request);
        } catch (const SpecError& e) {
          reply = protocol::errorReply(e.what(), e.path());
        } catch (const std::exception& e) {
          reply = protocol::errorReply(e.what());
        }
        if (!reply.is_null()) {
          if (request.contains("id")) reply["id"] = request["id"];
          const std::string body = reply.dump();
          control_.send(parts[0], zmq::send_flags::sndmore);
          control_.send(zmq::buffer(body), zmq::send_flags::dontwait);
        }
      } else if (!parts.empty()) {
        spdlog::warn("control: dropped a message of {} parts", parts.size());
      }
    }
    stages_->reap();
    reapCoordinators();
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

Json Daemon::handle(const Json& request) {
  const std::string type = request.value("type", "");
  if (type == protocol::kPing) return {{"ok", true}, {"control", controlEndpoint_}, {"data", dataEndpoint_}};
  if (type == protocol::kSubmit) return submit(request);
  if (type == protocol::kStatus) {
    return {{"ok", true}, {"job", jobs_->status(request.at("job").get<std::string>(), request.value("since", 0))}};
  }
  if (type == protocol::kList) return {{"ok", true}, {"jobs", jobs_->list()}};
  if (type == protocol::kCancel) return cancel(request);
  if (type == protocol::kStagePrepare) return stages_->prepare(request);
  if (type == protocol::kStageStart) return stages_->start(request);
  if (type == protocol::kStageAbort) return stages_->abort(request);
  if (type == protocol::kStagePlan) return stages_->plan(request);
  if (type == protocol::kStageProfile) return stages_->profile(request);
  if (type == protocol::kStageReport) {  // one-way: never answered, not even with an error
    try {
      jobs_->applyReport(request);
    } catch (const std::exception& e) {
      spdlog::warn("control: refused a stage report: {}", e.what());
    }
    return nullptr;
  }
  throw Error("unknown request type \"" + type + "\"");
}

Json Daemon::submit(const Json& request) {
  if (!request.contains("spec") || !request["spec"].is_string()) throw Error("submit needs \"spec\" (the job spec text)");
  const std::string text = request["spec"].get<std::string>();
  const protocol::JobSpec spec = protocol::parseJobSpec(text);
  checkCodecs(spec);
  const std::string id = jobs_->create(spec, text, request.value("dry_run", false));
  coordinators_[id] = std::make_unique<Coordinator>(context_, *jobs_, id, spec, text, controlEndpoint_);
  spdlog::info("job {} (\"{}\"): submitted, {} stages, {} steps", id, spec.name, spec.stages.size(), spec.steps);
  return {{"ok", true}, {"job", id}};
}

Json Daemon::cancel(const Json& request) {
  const std::string id = request.at("job").get<std::string>();
  if (jobs_->transition(id, JobState::Cancelled, "cancelled by request")) spdlog::info("job {}: cancel requested", id);
  return {{"ok", true}, {"state", toString(jobs_->state(id))}};
}

}  // namespace skytrain::daemon
