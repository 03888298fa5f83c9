// The planner: for every micro-batch count m dividing the batch whose activation stash
// fits, and every candidate schedule, predict the step time from the profiled costs —
// GPipe's closed form where it is exact (identical stages and links), the simulator
// otherwise — and take the minimum; candidates within 0.5% of it go to the smallest
// activation stash. Also: the monitor that says when to plan again.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "scheduler/cost_model.h"
#include "scheduler/schedule.h"

namespace skytrain::scheduler {

// A codec the planner may choose for one direction of one link, as profiled on the job's
// tensors: encode plus decode seconds and frame bytes, each a fit in the micro-batch size.
struct CodecOption {
  std::string name;    // its spec, e.g. "ef(int8)"
  LinearFit seconds;   // encode + decode of one micro-batch's tensor
  LinearFit bytes;     // the frame on the wire
};

struct PlannerInput {
  int batchSize = 1;  // one pipeline's: a replica's share of the job's batch
  int replicas = 1;   // pipelines side by side (data-parallel copies of every stage), sharing each link
  std::vector<StageProfile> stages;
  std::vector<LinkProfile> links;
  std::vector<ScheduleKind> schedules = {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                                         ScheduleKind::OneFOneBDelayAware, ScheduleKind::ZeroBubbleH1};
  // The one-step-delayed update (schedule.h): steps overlap, so a row's step time is the
  // stream's steady state (delayedStepSeconds) and only 1F1B kinds are candidates.
  bool delayedUpdate = false;
  double memoryBudgetBytes = 0;               // per stage, for the stash; 0: unlimited
  // Per link: the bytes of tied matrices' gradients (an embedding and a head on two stages)
  // that cross it each way once a step, after the last backward. Empty or 0: none.
  std::vector<double> tiedBytes;
  std::optional<int> microBatches;            // fixed m (the spec gave one)
  // Per link, the codecs "auto" may choose in each direction, in order of preference (ties
  // within 1% go to the earlier). Empty for a link: its codecs are fixed and already in the
  // stages' fits. When given, the stages' fits leave that direction's codec out and
  // outputBytes / gradientBytes come from the chosen option.
  std::vector<std::vector<CodecOption>> forwardCodecs, backwardCodecs;
};

struct PlanRow {
  int microBatches = 0;
  ScheduleKind schedule = ScheduleKind::GPipe;
  std::vector<int> warmups;    // per stage (1F1B kinds)
  double stepSeconds = 0;      // predicted
  double bubbleRatio = 0;      // predicted
  double bytesPerStep = 0;     // all links, both directions, every replica's pipeline
  double allReduceSeconds = 0; // the slowest stage's gradient all-reduce among its copies
  double tiedSeconds = 0;      // the tied matrices' gradients down the chain and their sum back
  double stashBytes = 0;       // the largest stage's activation stash
  bool fits = true;            // stash within the memory budget
  std::vector<std::string> forwardCodecs, backwardCodecs;  // per link, when the planner chose them
};

struct Plan {
  PlanRow chosen;
  // Every (m, schedule) under the chosen codecs, by m then schedule; then, when the planner
  // chose codecs, the best row of every other codec combination.
  std::vector<PlanRow> table;
};

// The input with one codec combination applied (choice: per link, the index of its forward
// and of its backward option): the codec's seconds added to the sending stage's forward
// (forward codec) or backward (backward codec), its bytes as the frame sizes.
PlannerInput withCodecs(const PlannerInput& input, const std::vector<std::pair<int, int>>& choice);

// Throws skytrain::Error when no candidate fits (naming the smallest stash it needed).
Plan makePlan(const PlannerInput& input);

// Predicted row for one (m, schedule).
PlanRow evaluate(const PlannerInput& input, int microBatches, ScheduleKind schedule);

// Says when measured step times have drifted from the prediction: more than `tolerance`
// (relative) off for `patience` consecutive steps. Fires once, then needs `patience` new
// steps against a new prediction.
class ReplanMonitor {
 public:
  explicit ReplanMonitor(double tolerance = 0.2, int patience = 5) : tolerance_(tolerance), patience_(patience) {}
  // Returns true when a re-plan is due.
  bool observe(double predictedSeconds, double measuredSeconds);
  void reset() { streak_ = 0; }

 private:
  double tolerance_;
  int patience_;
  int streak_ = 0;
};

}  // namespace skytrain::scheduler
