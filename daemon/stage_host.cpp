#include "daemon/stage_host.h"

#include <spdlog/spdlog.h>

#include "daemon/files.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

uint64_t jobKey(const std::string& jobId) {
  if (jobId.size() != 16 || jobId.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw Error("job id \"" + jobId + "\" is not 16 lowercase hex digits");
  }
  return std::stoull(jobId, nullptr, 16);
}

StageHost::StageHost(zmq::context_t& context, DataRouter& router, std::string stateDir, std::string dataEndpoint,
                     double memoryBudgetBytes)
    : context_(context),
      router_(router),
      stateDir_(std::move(stateDir)),
      dataEndpoint_(std::move(dataEndpoint)),
      memoryBudgetBytes_(memoryBudgetBytes) {}

StageHost::~StageHost() {
  for (auto& entry : workers_) entry.second->abort();
  workers_.clear();
}

StageWorker& StageHost::find(const protocol::Json& request) {
  const auto key = std::make_pair(request.at("job").get<std::string>(), request.at("stage").get<int>());
  auto it = workers_.find(key);
  if (it == workers_.end()) {
    throw Error("stage " + std::to_string(key.second) + " of job " + key.first + " is not hosted here");
  }
  return *it->second;
}

protocol::Json StageHost::prepare(const protocol::Json& request) {
  StageAssignment a;
  a.jobId = request.at("job").get<std::string>();
  a.jobKey = jobKey(a.jobId);
  a.stage = request.at("stage").get<int>();
  a.spec = protocol::parseJobSpec(request.at("spec").get<std::string>());
  a.coordinator = request.at("coordinator").get<std::string>();
  if (a.stage < 0 || a.stage >= static_cast<int>(a.spec.stages.size())) {
    throw Error("stage " + std::to_string(a.stage) + " is not in the job's spec");
  }
  const auto key = std::make_pair(a.jobId, a.stage);
  if (workers_.count(key)) throw Error("stage " + std::to_string(a.stage) + " of job " + a.jobId + " is already here");
  a.jobDir = stateDir_ + "/jobs/" + a.jobId;
  a.memoryBudgetBytes = memoryBudgetBytes_;
  makeDirectories(a.jobDir);
  auto mailbox = router_.open(a.jobKey, static_cast<uint16_t>(a.stage));
  spdlog::info("job {} stage {}: prepared (layers [{}, {}))", a.jobId, a.stage, a.spec.stages[a.stage].firstLayer,
               a.spec.stages[a.stage].lastLayer);
  workers_[key] = std::make_unique<StageWorker>(context_, std::move(a), std::move(mailbox));
  return {{"ok", true}, {"data_endpoint", dataEndpoint_}};
}

protocol::Json StageHost::start(const protocol::Json& request) {
  find(request).start(request.at("previous").get<std::string>(), request.at("next").get<std::string>());
  return {{"ok", true}};
}

protocol::Json StageHost::abort(const protocol::Json& request) {
  auto it = workers_.find({request.at("job").get<std::string>(), request.at("stage").get<int>()});
  if (it != workers_.end()) it->second->abort();  // idempotent: an unknown stage is already gone
  return {{"ok", true}};
}

protocol::Json StageHost::plan(const protocol::Json& request) {
  RunPlan plan;
  plan.microBatches = request.at("micro_batches").get<int>();
  const auto kind = scheduler::parseScheduleKind(request.at("schedule").get<std::string>());
  if (!kind) throw Error("plan names an unknown schedule " + request.at("schedule").dump());
  plan.schedule = *kind;
  plan.warmups = request.at("warmups").get<std::vector<int>>();
  find(request).deliverPlan(plan);
  return {{"ok", true}};
}

protocol::Json StageHost::profile(const protocol::Json& request) {
  const int at = request.at("at_step").get<int>();
  if (!find(request).requestProfile(at)) {
    throw Error("stage " + request.at("stage").dump() + " has already begun step " + std::to_string(at));
  }
  return {{"ok", true}};
}

void StageHost::reap() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (!it->second->finished()) {
      ++it;
      continue;
    }
    const auto& a = it->second->assignment();
    router_.close(a.jobKey, static_cast<uint16_t>(a.stage));
    it = workers_.erase(it);  // joins the finished thread
  }
}

}  // namespace skytrain::daemon
