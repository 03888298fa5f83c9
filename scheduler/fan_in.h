// The planner for a fan-in: producers 0..P-1 (PlannerInput::stages[0..P-1]) each train on
// their own batch and send it, micro-batch by micro-batch over links[p], to the consumer
// (stages[P]), which trains on all P batches; no gradient flows back, only one small
// acknowledgement per step, and a producer may start step s once the consumer finished
// step s - 1 - maxStaleness.
//
// With micro-batch size b = B/m, producer p's step takes A_p = m (f_p(b) + w_p(b)), the
// consumer's C = P m (f_c(b) + w_c(b)), link p carries m frames taking x_p(b) each.
// Without staleness a step is one wave: the consumer starts when the first micro-batch of
// the fastest producer arrives and ends no earlier than the last micro-batch of the slowest,
//   T0 = max( min_p(f_p + w_p + x_p + d_p)(b) + C,  max_p(A_p + x_p(b) + d_p) + (f_c + w_c)(b) ) + max_p d_p,
// the last term the acknowledgement's way back. With staleness S >= 1 producers and the
// consumer overlap across steps, so the slowest of them bounds the step, and S + 1 steps
// in flight hide the wave's latency:
//   T = max( max_p A_p,  C,  max_p m x_p(b),  T0 / (S + 1) ).
// The bubble reported is the consumer's idle share, 1 - C / T.
#pragma once

#include "scheduler/planner.h"

namespace skytrain::scheduler {

// One row per m dividing the batch (or the fixed m); the schedule field is unused.
// Throws skytrain::Error when the input does not describe a fan-in (P >= 1 producers, P
// links) or no m fits the memory budget.
Plan makeFanInPlan(const PlannerInput& input, int maxStaleness);
PlanRow evaluateFanIn(const PlannerInput& input, int microBatches, int maxStaleness);

}  // namespace skytrain::scheduler
