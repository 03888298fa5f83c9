// Pipeline schedules: the ordered forward/backward ops each stage runs in one step.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace skytrain::scheduler {

// Weight: under ZB-H1 a backward's deferred weight-gradient pass. Schedules list only F and
// B; W passes fill a stage's waits (see ScheduleKind::ZeroBubbleH1) and appear in the
// simulator's timeline.
enum class OpKind { Forward, Backward, Weight };

struct Op {
  OpKind kind = OpKind::Forward;
  int microBatch = 0;
  // Under the one-step-delayed update (delayedRoundOps): -1 for the previous step's deferred
  // backwards that run in this step's round; 0 otherwise.
  int step = 0;

  bool operator==(const Op& other) const {
    return kind == other.kind && microBatch == other.microBatch && step == other.step;
  }
};

// GPipe; 1F1B; 1F1B whose warm-up depth grows with the link round trip (see warmups);
// ZB-H1, the zero-bubble schedule with 1F1B's memory (Qi et al. 2023): 1f1b-delay's F and B
// order, each B computing only the input gradient (and the small parameters'), its weight
// gradient left for a W pass. A stage runs pending W passes, oldest first, while the frame
// its next F or B needs has not arrived, one at once when more than maxPendingWeights are
// pending, and the rest after its last B.
enum class ScheduleKind { GPipe, OneFOneB, OneFOneBDelayAware, ZeroBubbleH1 };

struct Schedule {
  ScheduleKind kind = ScheduleKind::GPipe;
  int microBatches = 0;
  std::vector<int> warmups;  // 1F1B kinds: forwards each stage runs before its first backward
  // ops[s] is the op order of stage s.
  std::vector<std::vector<Op>> ops;

  int stages() const { return static_cast<int>(ops.size()); }
  // ZB-H1: the W passes stage s may keep pending (its warm-up depth + 1: as many
  // micro-batches as 1F1B keeps stashed).
  int maxPendingWeights(int stage) const { return warmups.empty() ? 1 : warmups[static_cast<size_t>(stage)] + 1; }
};

// GPipe: all forwards, then all backwards in reverse micro-batch order.
// 1F1B: stage s warms up with min(p-s-1, m) forwards, then alternates one forward and one
// backward, then drains the remaining backwards. Throws skytrain::Error on p < 1 or m < 1.
// For OneFOneBDelayAware and ZeroBubbleH1 pass `warmups` (from delayAwareWarmups); the
// others ignore it.
Schedule makeSchedule(ScheduleKind kind, int stages, int microBatches, std::vector<int> warmups = {});

// Warm-up depths that keep 1F1B from stalling on long links: stage s keeps enough forwards
// in flight to cover, for every link downstream, the micro-batch's own slot plus
// ceil(round trip / (t_f + t_b)) more, where the round trip is 2 * (transfer + delay).
// Non-increasing in s, 0 on the last stage, at most m. Depth p-s-1 when links are free.
struct PipelineCosts;
std::vector<int> delayAwareWarmups(const PipelineCosts& costs, int microBatches);

// The one-step-delayed weight update (PipeDream-2BW's): step t's forwards and backwards run
// on weights that lack step t-1's gradient, W(t) = W(t-1) - update(g(t-2)), so a stage may
// start step t's forwards before step t-1's last backwards are done and the pipeline never
// drains between steps. A stage's round t of a 1F1B-kind schedule with warm-up w: this
// step's first w forwards, each followed by one of the previous step's deferred backwards
// (carryIn: the previous round deferred them), then 1F1B's steady part, then — without
// carryOut — this step's last w backwards; with carryOut they are deferred to the next
// round. Throws skytrain::Error on bad sizes.
std::vector<Op> delayedRoundOps(int warmup, int microBatches, bool carryIn, bool carryOut);

// `rounds` consecutive steps of `step` (a 1F1B kind) run as one stream under the delayed
// update, step r's micro-batch i numbered r*m + i: validateSchedule and simulate read it.
// The first round has nothing carried in, the last carries nothing out.
Schedule delayedStream(const Schedule& step, int rounds);

// "gpipe", "1f1b", "1f1b-delay" or "zb-h1"; nullopt for anything else.
std::optional<ScheduleKind> parseScheduleKind(std::string_view name);
std::string toString(ScheduleKind kind);
std::string toString(const Op& op);

// Empty when the schedule is complete and deadlock-free with unbounded link buffers:
// every stage runs F and B of every micro-batch exactly once, B(i) after F(i), and the
// cross-stage dependencies (F needs the previous stage's F, B the next stage's B) can be
// met. Otherwise the first problem found.
std::string validateSchedule(const Schedule& schedule);

}  // namespace skytrain::scheduler
