// Pipeline schedules: the ordered forward/backward ops each stage runs in one step.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace skytrain::scheduler {

enum class OpKind { Forward, Backward };

struct Op {
  OpKind kind = OpKind::Forward;
  int microBatch = 0;

  bool operator==(const Op& other) const {
    return kind == other.kind && microBatch == other.microBatch;
  }
};

// GPipe; 1F1B; 1F1B whose warm-up depth grows with the link round trip (see warmups).
enum class ScheduleKind { GPipe, OneFOneB, OneFOneBDelayAware };

struct Schedule {
  ScheduleKind kind = ScheduleKind::GPipe;
  int microBatches = 0;
  std::vector<int> warmups;  // 1F1B kinds: forwards each stage runs before its first backward
  // ops[s] is the op order of stage s.
  std::vector<std::vector<Op>> ops;

  int stages() const { return static_cast<int>(ops.size()); }
};

// GPipe: all forwards, then all backwards in reverse micro-batch order.
// 1F1B: stage s warms up with min(p-s-1, m) forwards, then alternates one forward and one
// backward, then drains the remaining backwards. Throws skytrain::Error on p < 1 or m < 1.
// For OneFOneBDelayAware pass `warmups` (from delayAwareWarmups); the others ignore it.
Schedule makeSchedule(ScheduleKind kind, int stages, int microBatches, std::vector<int> warmups = {});

// Warm-up depths that keep 1F1B from stalling on long links: stage s keeps enough forwards
// in flight to cover, for every link downstream, the micro-batch's own slot plus
// ceil(round trip / (t_f + t_b)) more, where the round trip is 2 * (transfer + delay).
// Non-increasing in s, 0 on the last stage, at most m. Depth p-s-1 when links are free.
struct PipelineCosts;
std::vector<int> delayAwareWarmups(const PipelineCosts& costs, int microBatches);

// "gpipe", "1f1b" or "1f1b-delay"; nullopt for anything else.
std::optional<ScheduleKind> parseScheduleKind(std::string_view name);
std::string toString(ScheduleKind kind);
std::string toString(const Op& op);

// Empty when the schedule is complete and deadlock-free with unbounded link buffers:
// every stage runs F and B of every micro-batch exactly once, B(i) after F(i), and the
// cross-stage dependencies (F needs the previous stage's F, B the next stage's B) can be
// met. Otherwise the first problem found.
std::string validateSchedule(const Schedule& schedule);

}  // namespace skytrain::scheduler
