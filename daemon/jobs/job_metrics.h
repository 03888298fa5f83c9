// JobMetrics: a job's figures as /metrics shows them (jobs/job_collector.h) — the
// last complete step's, the plan in force's and what each stage sent so far.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/jobs/job_record.h"

namespace skytrain::daemon {

// Unset: not measured yet.
struct JobMetrics {
  std::string id, name;
  JobState state = JobState::Preparing;
  int restarts = 0;
  int failures = 0;  // failure events, over every run of the job (resume keeps them)
  std::optional<int64_t> step;  // the last complete step
  std::optional<double> trainLoss, validationLoss, tokensPerSecond, stepSeconds, predictedStepSeconds;
  std::optional<double> bubble, predictedBubble, checkpointAgeSeconds;
  std::vector<StageTotals> stages;
  std::vector<std::pair<double, double>> links;  // the plan's: bandwidth (bytes/s), round trip (s)
  std::map<std::string, double> codeShares;      // the last step's, by the layer each learned code is before
  std::map<std::string, double> senderLosses;    // the last step's sender's own loss, by the layer of its cut
  double finishedAt = 0;  // wall-clock seconds when it ended; 0 while it runs
};

// The record's figures at wall-clock time `now` (for the checkpoint's age).
JobMetrics jobMetrics(const JobRecord& r, double now);

}  // namespace skytrain::daemon
