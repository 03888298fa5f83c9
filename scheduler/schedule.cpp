#include "scheduler/schedule.h"

#include <algorithm>

#include "scheduler/error.h"

namespace skytrain::scheduler {
namespace {

std::vector<Op> gpipeOps(int microBatches) {
  std::vector<Op> ops;
  for (int i = 0; i < microBatches; ++i) ops.push_back({OpKind::Forward, i});
  for (int i = microBatches - 1; i >= 0; --i) ops.push_back({OpKind::Backward, i});
  return ops;
}

std::vector<Op> oneFOneBOps(int stage, int stages, int microBatches) {
  std::vector<Op> ops;
  const int warmup = std::min(stages - stage - 1, microBatches);
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

Schedule makeSchedule(ScheduleKind kind, int stages, int microBatches) {
  if (stages < 1) throw Error("schedule: stage count must be >= 1, got " + std::to_string(stages));
  if (microBatches < 1) {
    throw Error("schedule: micro-batch count must be >= 1, got " + std::to_string(microBatches));
  }
  Schedule schedule;
  schedule.kind = kind;
  schedule.microBatches = microBatches;
  for (int s = 0; s < stages; ++s) {
    schedule.ops.push_back(kind == ScheduleKind::GPipe ? gpipeOps(microBatches)
                                                       : oneFOneBOps(s, stages, microBatches));
  }
  return schedule;
}

std::optional<ScheduleKind> parseScheduleKind(std::string_view name) {
  if (name == "gpipe") return ScheduleKind::GPipe;
  if (name == "1f1b") return ScheduleKind::OneFOneB;
  return std::nullopt;
}

std::string toString(ScheduleKind kind) { return kind == ScheduleKind::GPipe ? "gpipe" : "1f1b"; }

std::string toString(const Op& op) {
  return (op.kind == OpKind::Forward ? "F" : "B") + std::to_string(op.microBatch);
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
