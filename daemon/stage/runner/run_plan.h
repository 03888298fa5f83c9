// RunPlan: what the coordinator's planner chose for a stage, applied from the next step on.
#pragma once

#include <string>
#include <vector>

#include "scheduler/schedule.h"

namespace skytrain::daemon {

struct RunPlan {
  int microBatches = 1;
  scheduler::ScheduleKind schedule = scheduler::ScheduleKind::OneFOneB;
  std::vector<int> warmups;  // per stage, for 1f1b-delay
  // The codecs this stage encodes with, when the spec says "auto": forward to the next
  // stage, backward to the previous one. Empty: the spec's (or "none" before any plan).
  std::string forwardCodec, backwardCodec;
};

}  // namespace skytrain::daemon
