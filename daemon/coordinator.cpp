#include "daemon/coordinator.h"

#include <spdlog/spdlog.h>

#include <map>
#include <memory>

#include "daemon/protocol/control.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

constexpr std::chrono::milliseconds kStageRequestTimeout{5000};

}  // namespace

Coordinator::Coordinator(zmq::context_t& context, JobTable& table, std::string jobId, protocol::JobSpec spec,
                         std::string specText, std::string selfControl)
    : context_(context),
      table_(table),
      jobId_(std::move(jobId)),
      spec_(std::move(spec)),
      specText_(std::move(specText)),
      selfControl_(std::move(selfControl)) {
  thread_ = std::thread([this] { run(); });
}

Coordinator::~Coordinator() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void Coordinator::run() {
  const int stages = static_cast<int>(spec_.stages.size());
  try {
    std::vector<std::string> data(stages);
    for (int i = 0; i < stages; ++i) {
      protocol::ControlClient client(context_, spec_.stages[i].daemon);
      try {
        const auto reply = client.request({{"type", protocol::kStagePrepare}, {"job", jobId_}, {"stage", i},
                                           {"spec", specText_}, {"coordinator", selfControl_}},
                                          kStageRequestTimeout);
        data[i] = reply.at("data_endpoint").get<std::string>();
      } catch (const std::exception& e) {
        throw PeerError("stage " + std::to_string(i) + " (" + spec_.stages[i].daemon + "): " + e.what());
      }
    }
    for (int i = 0; i < stages; ++i) {
      protocol::ControlClient client(context_, spec_.stages[i].daemon);
      client.request({{"type", protocol::kStageStart}, {"job", jobId_}, {"stage", i},
                      {"previous", i > 0 ? data[i - 1] : ""}, {"next", i + 1 < stages ? data[i + 1] : ""}},
                     kStageRequestTimeout);
    }
    table_.transition(jobId_, JobState::Running);
    spdlog::info("job {}: running on {} stages", jobId_, stages);
    while (true) {
      if (table_.waitForEnd(jobId_, std::chrono::milliseconds(200))) {
        table_.transition(jobId_, JobState::Succeeded);
        break;
      }
      if (isTerminal(table_.state(jobId_))) break;
      if (stopping_) {
        table_.transition(jobId_, JobState::Failed, "the coordinating daemon shut down");
        break;
      }
    }
  } catch (const std::exception& e) {
    table_.transition(jobId_, JobState::Failed, e.what());
  }
  const JobState final = table_.state(jobId_);
  if (final != JobState::Succeeded) abortStages();
  spdlog::info("job {}: {}", jobId_, toString(final));
  finished_ = true;
}

void Coordinator::abortStages() {
  for (int i = 0; i < static_cast<int>(spec_.stages.size()); ++i) {
    try {
      protocol::ControlClient client(context_, spec_.stages[i].daemon);
      client.request({{"type", protocol::kStageAbort}, {"job", jobId_}, {"stage", i}}, std::chrono::milliseconds(2000));
    } catch (const std::exception& e) {
      spdlog::warn("job {}: could not abort stage {}: {}", jobId_, i, e.what());
    }
  }
}

}  // namespace skytrain::daemon
