#include "daemon/jobs/job_collector.h"

#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "daemon/jobs/job_table.h"
#include "daemon/ops/metrics/metric_families.h"
#include "daemon/ops/timing.h"

namespace skytrain::daemon {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricType;

void addJob(Families& f, const JobMetrics& job) {
  const std::vector<ClientMetric::Label> labels = {{"job_id", job.id}, {"name", job.name}};
  const auto gauge = [&](const char* name, const char* help, const std::optional<double>& value) {
    if (value) f.add(name, MetricType::Gauge, help, labels, *value);
  };
  if (job.step) gauge("skytrain_job_step", "Number of the last complete step of the job (1-based: the 20th step is 20, as status and logs show it).", static_cast<double>(*job.step));
  gauge("skytrain_job_train_loss", "Training loss of the last complete step.", job.trainLoss);
  gauge("skytrain_job_validation_loss", "Loss on the held-out data at the last validation pass.", job.validationLoss);
  gauge("skytrain_job_tokens_per_second", "Tokens trained per second in the last complete step.", job.tokensPerSecond);
  gauge("skytrain_job_step_seconds", "Measured wall time of the last complete step.", job.stepSeconds);
  gauge("skytrain_job_predicted_step_seconds", "Step time the plan in force predicts.", job.predictedStepSeconds);
  gauge("skytrain_job_bubble_ratio", "Idle share of the stages in the last complete step.", job.bubble);
  gauge("skytrain_job_predicted_bubble_ratio", "Idle share the plan in force predicts.", job.predictedBubble);
  gauge("skytrain_job_checkpoint_age_seconds", "Seconds since the newest complete checkpoint.", job.checkpointAgeSeconds);
  f.add("skytrain_job_restarts_total", MetricType::Counter, "Times the job restarted from a checkpoint.", labels,
        job.restarts);
  f.add("skytrain_job_failures_total", MetricType::Counter,
        "Attempts of the job that failed, each explained by an event in status and logs.", labels, job.failures);
  for (size_t s = 0; s < job.stages.size(); ++s) {
    const StageTotals& t = job.stages[s];
    for (const auto& [direction, wire, raw] : {std::tuple{"forward", t.bytesForward, t.rawForward},
                                               std::tuple{"backward", t.bytesBackward, t.rawBackward}}) {
      auto at = labels;
      at.push_back({"stage", std::to_string(s)});
      at.push_back({"direction", direction});
      f.add("skytrain_stage_sent_bytes_total", MetricType::Counter,
            "Bytes a stage sent on the wire (frames after compression); forward: to the next stage.", at, wire);
      f.add("skytrain_stage_sent_raw_bytes_total", MetricType::Counter,
            "What the tensors a stage sent take uncompressed.", at, raw);
    }
    auto at = labels;
    at.push_back({"stage", std::to_string(s)});
    f.add("skytrain_stage_compute_seconds_total", MetricType::Counter,
          "Forward, backward, optimizer and codec time of a stage.", at, t.computeSeconds);
  }
  for (const auto& [layer, share] : job.codeShares) {
    auto at = labels;
    at.push_back({"cut", layer});
    f.add("skytrain_job_code_share", MetricType::Gauge,
          "A learned code's share of the hidden state the stage after its cut rebuilds (RMS of the decoded code over "
          "RMS of the state) in the last complete step, by the layer the cut is before; near zero, the stage "
          "after the cut does not read the code.",
          at, share);
  }
  for (const auto& [layer, loss] : job.senderLosses) {
    auto at = labels;
    at.push_back({"cut", layer});
    f.add("skytrain_job_sender_loss", MetricType::Gauge,
          "The sender's own next-token loss at a cut (model.subspace.sender_loss; unweighted, the mean over the "
          "step's micro-batches) in the last complete step, by the layer the cut is before.",
          at, loss);
  }
  for (size_t l = 0; l < job.links.size(); ++l) {
    auto at = labels;
    at.push_back({"link", std::to_string(l) + "-" + std::to_string(l + 1)});
    f.add("skytrain_link_bandwidth_bytes_per_second", MetricType::Gauge,
          "Bandwidth of the link between two stages as the planner measured it.", at, job.links[l].first);
    f.add("skytrain_link_rtt_seconds", MetricType::Gauge, "Round trip of the link as the planner measured it.", at,
          job.links[l].second);
  }
}

}  // namespace

std::vector<prometheus::MetricFamily> JobCollector::Collect() const {
  Families f;
  try {
    const auto jobs = jobs_.metrics();
    std::map<JobState, int> byState;
    for (auto state : kJobStates) byState[state] = 0;
    for (const auto& job : jobs) ++byState[job.state];
    for (const auto& [state, count] : byState) {
      f.add("skytrain_jobs", MetricType::Gauge, "Jobs this daemon coordinates, by state.", {{"state", toString(state)}},
            count);
    }
    const double now = wallSeconds();
    for (const auto& job : jobs) {
      if (retentionS_ > 0 && job.finishedAt > 0 && now - job.finishedAt > retentionS_) continue;
      addJob(f, job);
    }
  } catch (const std::exception&) {
    // A scrape never fails the daemon: the families after these (refusals, the process's)
    // still go out.
  }
  return f.take();
}

}  // namespace skytrain::daemon
