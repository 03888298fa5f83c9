#include "daemon/jobs/report_aggregator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "daemon/ops/timing.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

// Adds a stage's step report (checked by the protocol's parser) to its totals.
void addTo(std::vector<StageTotals>& totals, int stage, const Json& report) {
  if (static_cast<int>(totals.size()) <= stage) totals.resize(stage + 1);
  StageTotals& t = totals[stage];
  const double backward = report.value("bytes_backward", 0.0), rawBackward = report.value("raw_backward", 0.0);
  t.bytesBackward += backward;
  t.bytesForward += report.value("bytes_sent", 0.0) - backward;
  t.rawBackward += rawBackward;
  t.rawForward += report.value("bytes_raw", 0.0) - rawBackward;
  t.computeSeconds += report.value("compute_s", 0.0);
}

}  // namespace

bool ReportAggregator::apply(JobRecord& r, const protocol::StageReport& report) const {
  using protocol::ReportKind;
  if (report.attempt != r.attempt) return false;  // a late report of an aborted attempt
  if (report.stage >= static_cast<int>(r.spec.stages.size()) || report.replica >= protocol::replicaCount(r.spec)) {
    throw WireError("report for job " + r.id + " names stage " + std::to_string(report.stage) + " replica " +
                    std::to_string(report.replica) + ", which does not exist");
  }
  const int stage = protocol::slotOf(r.spec, report.stage, report.replica);  // a slot: stage i replica 0 is i
  if (!isActiveSlot(r, stage)) return false;  // a copy of a pipeline that left, reporting late
  AttemptReports& reports = r.reports;
  switch (report.kind) {
    case ReportKind::Step:
      if (report.step < static_cast<int64_t>(r.steps.size()) || report.step >= r.spec.steps) {
        throw WireError("report for job " + r.id + " step " + std::to_string(report.step + 1) + " is out of order");
      }
      reports.pending[report.step][stage] = protocol::toJson(report);
      completeSteps(r);
      break;
    case ReportKind::Ready:  // of a step whose commit is next: at most two past the last row
      if (report.step < static_cast<int64_t>(r.steps.size()) || report.step > static_cast<int64_t>(r.steps.size()) + 2 ||
          report.step >= r.spec.steps) {
        throw WireError("report for job " + r.id + " step " + std::to_string(report.step + 1) + " is out of order");
      }
      reports.ready[report.step].insert(stage);
      break;
    case ReportKind::Eval:
      // The first pipeline that trains validates for all.
      if (report.replica != (reports.pipelines.empty() ? 0 : reports.pipelines.front())) break;
      r.evals.push_back({{"step", report.step}, {"loss", *report.loss}, {"time", wallSeconds()}});
      if (report.accuracy) r.evals.back()["accuracy"] = *report.accuracy;
      if (report.bleu) r.evals.back()["bleu"] = *report.bleu;
      files_.save(r);
      break;
    case ReportKind::Profile: reports.profiles[report.step][stage] = report.profile; break;
    case ReportKind::Done: reports.stagesDone.insert(stage); break;
    case ReportKind::Failed:
      // A stage that names the culprit beats one that only saw its effect.
      if (!reports.stageFailure || reports.stageFailure->find("in another stage") != std::string::npos) {
        const std::string& daemon = protocol::placementOf(r.spec, stage).daemon;
        reports.stageFailure = protocol::describeSlot(r.spec, stage) + " (" + daemon + "): " +
                               (report.error.empty() ? "failed" : report.error);
      }
      break;
    case ReportKind::Checkpoint:
      if (report.error.empty()) {
        confirmCheckpoint(r, report.step, stage);
      } else {  // training goes on; the newest complete checkpoint stays the one before
        const std::string message = protocol::describeSlot(r.spec, stage) + " (" + protocol::placementOf(r.spec, stage).daemon +
                                    "): checkpoint of step " + std::to_string(report.step + 1) + " not written: " +
                                    report.error + "; training goes on and the next checkpoint retries";
        spdlog::warn("job {}: {}", r.id, message);
        r.events.push_back({{"time", wallSeconds()}, {"step", r.steps.size()}, {"message", message}});
        files_.save(r);
      }
      break;
  }
  return true;
}

void ReportAggregator::narrow(JobRecord& r, std::vector<int> pipelines) const {
  r.reports.pipelines = std::move(pipelines);
  for (auto& [step, reports] : r.reports.pending) {
    for (auto it = reports.begin(); it != reports.end();) it = isActiveSlot(r, it->first) ? std::next(it) : reports.erase(it);
  }
  completeSteps(r);
}

// A checkpoint counts once every slot has written it; the spec's keep newest are kept.
void ReportAggregator::confirmCheckpoint(JobRecord& r, int64_t step, int slot) const {
  auto& confirmed = r.reports.confirmations[step];
  confirmed.insert(slot);
  if (static_cast<int>(confirmed.size()) != activeSlots(r)) return;
  r.reports.confirmations.erase(step);
  if (r.checkpoints.empty() || r.checkpoints.back() < step) r.checkpoints.push_back(step);
  r.checkpointAt = wallSeconds();
  while (static_cast<int>(r.checkpoints.size()) > r.spec.checkpoint.keep) r.checkpoints.erase(r.checkpoints.begin());
  files_.save(r);
}

// A step row is complete once every stage has reported it; rows complete in step order.
void ReportAggregator::completeSteps(JobRecord& r) const {
  auto& pending = r.reports.pending;
  const size_t stages = r.spec.stages.size();
  const size_t slots = static_cast<size_t>(activeSlots(r));
  while (!pending.empty() && pending.begin()->second.size() == slots &&
         pending.begin()->first == static_cast<int64_t>(r.steps.size())) {
    const auto& reports = pending.begin()->second;
    double stepSeconds = 0, bytes = 0, raw = 0, checkpoint = 0;
    bool skipped = false;
    int lead = -1;
    Json compute = Json::array(), losses = Json::array(), shares = Json::object();
    std::map<std::string, std::pair<double, int>> senders;  // each cut's sender's own loss: sum over copies, copies
    // The training loss: the mean of the last stage's copies that train, each over its share
    // of the batch.
    Json loss = 0.0;
    const int copies = activeSlots(r) / static_cast<int>(stages);
    for (int replica = 0; replica < protocol::replicaCount(r.spec); ++replica) {
      const int slot = protocol::slotOf(r.spec, static_cast<int>(stages) - 1, replica);
      if (!isActiveSlot(r, slot)) continue;
      const Json& part = reports.at(slot).at("loss");
      loss = part.is_number() && loss.is_number() ? Json(loss.get<double>() + part.get<double>() / copies) : Json();
    }
    for (const auto& entry : reports) {
      stepSeconds = std::max(stepSeconds, entry.second.at("step_s").get<double>());
      checkpoint = std::max(checkpoint, entry.second.value("checkpoint_s", 0.0));
      skipped = skipped || entry.second.value("skipped", false);
      bytes += entry.second.at("bytes_sent").get<double>();
      raw += entry.second.value("bytes_raw", 0.0);
      compute.push_back(entry.second.at("compute_s"));
      losses.push_back(entry.second.value("loss", Json()));
      lead = std::max(lead, entry.second.value("lead", -1));
      // A stage decodes the code at its own input only: what it says of another cut is dropped.
      const int stage = protocol::stageOfSlot(r.spec, entry.first);
      const std::string own = std::to_string(r.spec.stages[stage].firstLayer);
      if (const auto it = entry.second.find("code_share"); stage > 0 && it != entry.second.end() && it->contains(own)) {
        if (!shares.contains(own)) shares[own] = it->at(own);  // a replicated stage: its first copy's
      }
      // ... and has a sender's loss at its end only.
      const std::string end = std::to_string(r.spec.stages[stage].lastLayer);
      if (const auto it = entry.second.find("sender_loss"); stage + 1 < static_cast<int>(stages) &&
                                                            it != entry.second.end() && it->contains(end)) {
        auto& [sum, copies] = senders[end];
        sum += it->at(end).get<double>();  // a replicated stage: the mean of its copies'
        ++copies;
      }
      addTo(r.totals, stage, entry.second);
    }
    // A fan-in's step trains every producer's batch.
    const double batches = protocol::isFanIn(r.spec) ? static_cast<double>(stages - 1) : 1.0;
    const double tokens = batches * r.spec.batchSize * r.spec.model.seqLen;
    Json row = {{"step", pending.begin()->first},
                {"loss", loss},
                {"step_s", stepSeconds},
                {"tokens_per_s", stepSeconds > 0 ? tokens / stepSeconds : 0.0},
                {"bytes_sent", bytes},
                {"bytes_raw", raw},
                {"micro_batches", reports.begin()->second.value("micro_batches", 0)},
                {"checkpoint_s", checkpoint},
                {"lr", reports.begin()->second.value("lr", 0.0)},
                {"skipped", skipped},
                {"attempt", r.attempt},  // which run of the job made it (a rebuilt record resumes past it)
                {"compute_s", compute},
                {"time", wallSeconds()}};  // when the step completed (plots against wall-clock)
    if (!shares.empty()) row["code_share"] = shares;  // by the layer each learned code is before
    for (const auto& [layer, value] : senders) row["sender_loss"][layer] = value.first / value.second;
    if (protocol::isFanIn(r.spec)) {
      row["stage_losses"] = losses;  // each generator's masked-token loss, then the discriminator's
      row["lead"] = lead;            // how far the furthest producer ran ahead of the consumer
    }
    r.steps.push_back(std::move(row));
    files_.appendStep(r, r.steps.back());
    pending.erase(pending.begin());
  }
}

}  // namespace skytrain::daemon
