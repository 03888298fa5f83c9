#include "scheduler/simulator.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <string>

#include "scheduler/error.h"

namespace skytrain::scheduler {
namespace {

constexpr double kUnknown = std::numeric_limits<double>::infinity();

// One direction of one link: messages leave in send order, one at a time.
struct Channel {
  double freeAt = 0;
  // Arrival time of a message whose payload is ready at `ready`.
  double send(double ready, double transfer, double delay) {
    const double start = std::max(ready, freeAt);
    freeAt = start + transfer;
    return freeAt + delay;
  }
};

}  // namespace

double SimulationResult::bubbleRatio() const {
  if (stepSeconds <= 0 || busySeconds.empty()) return 0;
  double busy = 0;
  for (double b : busySeconds) busy += b;
  return 1.0 - busy / (stepSeconds * static_cast<double>(busySeconds.size()));
}

SimulationResult simulate(const Schedule& schedule, const PipelineCosts& costs) {
  const int p = schedule.stages();
  const int m = schedule.microBatches;
  if (static_cast<int>(costs.stages.size()) != p || static_cast<int>(costs.links.size()) != p - 1) {
    throw Error("simulate: " + std::to_string(costs.stages.size()) + " stage costs and " +
                std::to_string(costs.links.size()) + " links for a " + std::to_string(p) + "-stage schedule");
  }
  // arrival[s][kind][i]: when the input of op (kind, i) reaches stage s.
  std::vector<std::vector<std::vector<double>>> arrival(p, std::vector<std::vector<double>>(2, std::vector<double>(m, kUnknown)));
  std::vector<std::vector<double>> forwardDone(p, std::vector<double>(m, kUnknown));
  for (int i = 0; i < m; ++i) arrival[0][0][i] = 0;
  for (int i = 0; i < m; ++i) arrival[p - 1][1][i] = kUnknown;  // set when the last stage's F(i) ends
  std::vector<Channel> down(p), up(p);  // down[s]: s -> s+1, up[s]: s+1 -> s
  std::vector<double> freeAt(p, 0);
  std::vector<size_t> next(p, 0);
  SimulationResult result;
  result.busySeconds.assign(p, 0);
  result.timeline.assign(p, {});
  // ZB-H1: each stage's pending W passes, oldest first (ScheduleKind::ZeroBubbleH1).
  const bool splitBackward = schedule.kind == ScheduleKind::ZeroBubbleH1;
  std::vector<std::deque<int>> pendingWeights(p);
  auto runWeight = [&](int s) {
    const double start = freeAt[s], duration = costs.stages[s].weightSeconds;
    freeAt[s] = start + duration;
    result.busySeconds[s] += duration;
    result.timeline[s].push_back({{OpKind::Weight, pendingWeights[s].front()}, start, freeAt[s]});
    result.stepSeconds = std::max(result.stepSeconds, freeAt[s]);
    pendingWeights[s].pop_front();
  };
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < schedule.ops[s].size()) {
        const Op& op = schedule.ops[s][next[s]];
        const bool forward = op.kind == OpKind::Forward;
        const int i = op.microBatch;
        double ready = arrival[s][forward ? 0 : 1][i];
        if (!forward) ready = std::max(ready, forwardDone[s][i]);
        if (ready == kUnknown) break;
        while (!pendingWeights[s].empty() && freeAt[s] < ready) runWeight(s);  // fill the wait
        const double start = std::max(ready, freeAt[s]);
        const double duration = forward          ? costs.stages[s].forwardSeconds
                                : splitBackward ? costs.stages[s].backwardSeconds - costs.stages[s].weightSeconds
                                                 : costs.stages[s].backwardSeconds;
        const double end = start + duration;
        freeAt[s] = end;
        result.busySeconds[s] += duration;
        result.timeline[s].push_back({op, start, end});
        result.stepSeconds = std::max(result.stepSeconds, end);
        if (!forward && splitBackward) {
          pendingWeights[s].push_back(i);
          if (static_cast<int>(pendingWeights[s].size()) > schedule.maxPendingWeights(s)) runWeight(s);
        }
        if (forward) {
          forwardDone[s][i] = end;
          if (s + 1 < p) {
            arrival[s + 1][0][i] = down[s].send(end, costs.links[s].forwardSeconds, costs.links[s].delaySeconds);
          } else {
            arrival[s][1][i] = end;  // the loss's gradient is local
          }
        } else if (s > 0) {
          arrival[s - 1][1][i] = up[s - 1].send(end, costs.links[s - 1].backwardSeconds, costs.links[s - 1].delaySeconds);
        }
        ++next[s];
        progressed = true;
      }
      if (next[s] == schedule.ops[s].size()) {
        while (!pendingWeights[s].empty()) runWeight(s);  // after the last B
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    if (next[s] < schedule.ops[s].size()) {
      throw Error("simulate: deadlock at stage " + std::to_string(s) + " op " + toString(schedule.ops[s][next[s]]));
    }
  }
  return result;
}

double delayedStepSeconds(const Schedule& step, const PipelineCosts& costs) {
  // The stream's fill and final drain cancel in the difference; three rounds in each leave
  // the warm-up behind.
  constexpr int kShort = 3, kLong = 6;
  const double shortRun = simulate(delayedStream(step, kShort), costs).stepSeconds;
  const double longRun = simulate(delayedStream(step, kLong), costs).stepSeconds;
  return (longRun - shortRun) / (kLong - kShort);
}

double gpipeStepSeconds(int stages, int microBatches, double tf, double tb, double x, double d) {
  const double p = stages, m = microBatches;
  return (p - 1) * (tf + tb + 2 * x + 2 * d) + tf + tb + (m - 1) * (std::max(tf, x) + std::max(tb, x));
}

double bubbleRatio(int microBatches, double tf, double tb, double stepSeconds) {
  return stepSeconds <= 0 ? 0 : 1.0 - microBatches * (tf + tb) / stepSeconds;
}

}  // namespace skytrain::scheduler
