// Discrete-event simulation of one pipeline step, and the closed forms it is checked against.
//
// Model: a stage runs its ops in schedule order, one at a time; F(i) needs the activation of
// i from the previous stage, B(i) needs F(i) done and the gradient of i from the next stage.
// When an op ends, its output is sent at once (sending overlaps compute): each direction of
// a link carries one message at a time for its transfer time x, FIFO in send order, and the
// message arrives a one-way delay d after its transfer ends (full duplex: forward and
// backward messages do not queue behind each other). Codec work is inside t_f and t_b.
// Under ZB-H1 a B takes t_b - t_w and each W pass t_w, run as ScheduleKind::ZeroBubbleH1
// says: a stage whose next op's input is not there yet runs pending W passes (the last may
// end after the input arrives, as at run time).
#pragma once

#include <vector>

#include "scheduler/cost_model.h"
#include "scheduler/schedule.h"

namespace skytrain::scheduler {

struct OpTiming {
  Op op;
  double start = 0;
  double end = 0;
};

struct SimulationResult {
  double stepSeconds = 0;                    // last op's end
  std::vector<double> busySeconds;           // per stage
  std::vector<std::vector<OpTiming>> timeline;  // per stage, in execution order

  // 1 - m (t_f + t_b) summed over stages / (p T): the share of stage-time spent idle.
  double bubbleRatio() const;
};

// Throws skytrain::Error when the schedule deadlocks or its stage count differs from costs'.
SimulationResult simulate(const Schedule& schedule, const PipelineCosts& costs);

// The steady-state step time of `step` (a 1F1B kind) under the one-step-delayed update: the
// time between consecutive rounds' ends in a stream of rounds (delayedStream), where no
// step waits for the previous one's drain. Throws as simulate does.
double delayedStepSeconds(const Schedule& step, const PipelineCosts& costs);

// GPipe with p identical stages and links: T = (p-1)(t_f + t_b + 2x + 2d) + t_f + t_b +
// (m-1)(max(t_f, x) + max(t_b, x)), with x the transfer time of one message.
double gpipeStepSeconds(int stages, int microBatches, double tf, double tb, double x, double d);

// 1 - m (t_f + t_b) / T; without communication GPipe's is (p-1) / (m+p-1).
double bubbleRatio(int microBatches, double tf, double tb, double stepSeconds);

}  // namespace skytrain::scheduler
