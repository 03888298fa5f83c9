#include "scheduler/schedule.h"

#include <algorithm>

#include <cmath>

#include "scheduler/cost_model.h"
#include "scheduler/error.h"

namespace skytrain::scheduler {
namespace {

std::vector<Op> gpipeOps(int microBatches) {
  std::vector<Op> ops;
  for (int i = 0; i < microBatches; ++i) ops.push_back({OpKind::Forward, i});
  for (int i = microBatches - 1; i >= 0; --i) ops.push_back({OpKind::Backward, i});
  return ops;
}

std::vector<Op> oneFOneBOps(int warmup, int microBatches) {
  std::vector<Op> ops;
  warmup = std::min(warmup, microBatches);
  int nextForward = 0;
  int nextBackward = 0;
  for (; nextForward < warmup; ++nextForward) ops.push_back({OpKind::Forward, nextForward});
  for (; nextForward < microBatches; ++nextForward, ++nextBackward) {
    ops.push_back({OpKind::Forward, nextForward});
    ops.push_back({OpKind::Backward, nextBackward});
  }
  for (; nextBackward < microBatches; ++nextBackward) {
    ops.push_back({OpKind::Backward, nextBackward});
  }
  return ops;
}

}  // namespace

std::vector<int> delayAwareWarmups(const PipelineCosts& costs, int microBatches) {
  const int p = static_cast<int>(costs.stages.size());
  std::vector<int> warmups(p, 0);
  for (int s = p - 2; s >= 0; --s) {
    const auto& link = costs.links[s];
    const double compute = std::max(1e-12, costs.stages[s].forwardSeconds + costs.stages[s].backwardSeconds);
    const double roundTrip = link.forwardSeconds + link.backwardSeconds + 2 * link.delaySeconds;
    const int extra = static_cast<int>(std::ceil(roundTrip / compute - 1e-9));
    warmups[s] = std::min(microBatches, warmups[s + 1] + 1 + extra);
  }
  return warmups;
}

Schedule makeSchedule(ScheduleKind kind, int stages, int microBatches, std::vector<int> warmups) {
  if (stages < 1) throw Error("schedule: stage count must be >= 1, got " + std::to_string(stages));
  if (microBatches < 1) {
    throw Error("schedule: micro-batch count must be >= 1, got " + std::to_string(microBatches));
  }
  Schedule schedule;
  schedule.kind = kind;
  schedule.microBatches = microBatches;
  if (kind == ScheduleKind::OneFOneBDelayAware || kind == ScheduleKind::ZeroBubbleH1) {
    if (static_cast<int>(warmups.size()) != stages) {
      throw Error("schedule: " + toString(kind) + " needs one warm-up depth per stage, got " +
                  std::to_string(warmups.size()));
    }
  } else {
    warmups.clear();
    for (int s = 0; s < stages; ++s) warmups.push_back(std::min(stages - s - 1, microBatches));
  }
  for (int s = 0; s < stages; ++s) {
    schedule.ops.push_back(kind == ScheduleKind::GPipe ? gpipeOps(microBatches) : oneFOneBOps(warmups[s], microBatches));
  }
  if (kind != ScheduleKind::GPipe) schedule.warmups = warmups;
  return schedule;
}

std::vector<Op> delayedRoundOps(int warmup, int microBatches, bool carryIn, bool carryOut) {
  if (microBatches < 1 || warmup < 0) {
    throw Error("delayed round: needs m >= 1 and warm-up >= 0, got m=" + std::to_string(microBatches) +
                " warm-up " + std::to_string(warmup));
  }
  const int m = microBatches, w = std::min(warmup, microBatches);
  std::vector<Op> ops;
  for (int j = 0; j < w; ++j) {
    ops.push_back({OpKind::Forward, j});
    if (carryIn) ops.push_back({OpKind::Backward, m - w + j, -1});
  }
  for (int i = 0; i < m - w; ++i) {
    ops.push_back({OpKind::Forward, w + i});
    ops.push_back({OpKind::Backward, i});
  }
  if (!carryOut) {
    for (int i = m - w; i < m; ++i) ops.push_back({OpKind::Backward, i});
  }
  return ops;
}

Schedule delayedStream(const Schedule& step, int rounds) {
  if (step.kind == ScheduleKind::GPipe || step.kind == ScheduleKind::ZeroBubbleH1 ||
      static_cast<int>(step.warmups.size()) != step.stages()) {
    throw Error("delayed update: needs a 1F1B-kind schedule (not zb-h1) with its warm-up depths");
  }
  if (rounds < 1) throw Error("delayed update: rounds must be >= 1");
  const int m = step.microBatches;
  Schedule stream;
  stream.kind = step.kind;
  stream.microBatches = m * rounds;
  stream.warmups = step.warmups;
  stream.ops.resize(step.ops.size());
  for (int s = 0; s < step.stages(); ++s) {
    for (int r = 0; r < rounds; ++r) {
      for (const Op& op : delayedRoundOps(step.warmups[s], m, r > 0, r + 1 < rounds)) {
        stream.ops[s].push_back({op.kind, (r + op.step) * m + op.microBatch});
      }
    }
  }
  return stream;
}

std::optional<ScheduleKind> parseScheduleKind(std::string_view name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  if (name == "1f1b-delay") return ScheduleKind::OneFOneBDelayAware;
  if (name == "zb-h1") return ScheduleKind::ZeroBubbleH1;
  return std::nullopt;
}

std::string toString(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::OneFOneBDelayAware: return "1f1b-delay";
    case ScheduleKind::ZeroBubbleH1: return "zb-h1";
  }
  return "unknown";
}

std::string toString(const Op& op) {
  const char* kind = op.kind == OpKind::Forward ? "F" : op.kind == OpKind::Backward ? "B" : "W";
  return kind + std::to_string(op.microBatch) + (op.step < 0 ? "'" : "");
}

std::string validateSchedule(const Schedule& schedule) {
  const int p = schedule.stages();
  const int m = schedule.microBatches;
  // done[s][kind][i]: whether stage s has run that op; pos[s]: next op index.
  std::vector<std::vector<std::vector<bool>>> done(
      p, std::vector<std::vector<bool>>(2, std::vector<bool>(m, false)));
  for (int s = 0; s < p; ++s) {
    std::vector<int> forwards(m, 0), backwards(m, 0);
    for (const Op& op : schedule.ops[s]) {
      if (op.microBatch < 0 || op.microBatch >= m) {
        return "stage " + std::to_string(s) + ": op " + toString(op) + " out of range";
      }
      (op.kind == OpKind::Forward ? forwards : backwards)[op.microBatch]++;
    }
    for (int i = 0; i < m; ++i) {
      if (forwards[i] != 1 || backwards[i] != 1) {
        return "stage " + std::to_string(s) + ": micro-batch " + std::to_string(i) +
               " has " + std::to_string(forwards[i]) + " forwards and " +
               std::to_string(backwards[i]) + " backwards";
      }
    }
  }
  std::vector<size_t> pos(p, 0);
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int s = 0; s < p; ++s) {
      while (pos[s] < schedule.ops[s].size()) {
        const Op& op = schedule.ops[s][pos[s]];
        const int i = op.microBatch;
        bool ready;
        if (op.kind == OpKind::Forward) {
          ready = s == 0 || done[s - 1][0][i];
        } else {
          ready = done[s][0][i] && (s == p - 1 || done[s + 1][1][i]);
        }
        if (!ready) break;
        done[s][op.kind == OpKind::Forward ? 0 : 1][i] = true;
        ++pos[s];
        progressed = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    if (pos[s] < schedule.ops[s].size()) {
      return "deadlock: stage " + std::to_string(s) + " blocks at op " +
             toString(schedule.ops[s][pos[s]]);
    }
  }
  return {};
}

}  // namespace skytrain::scheduler
