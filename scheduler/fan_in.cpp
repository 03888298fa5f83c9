#include "scheduler/fan_in.h"

#include <algorithm>
#include <limits>

#include "scheduler/error.h"

namespace skytrain::scheduler {

PlanRow evaluateFanIn(const PlannerInput& input, int m, int maxStaleness) {
  const int producers = static_cast<int>(input.stages.size()) - 1;
  SKYTRAIN_CHECK(producers >= 1 && static_cast<int>(input.links.size()) == producers,
                 "a fan-in needs producers, a consumer and a link per producer");
  SKYTRAIN_CHECK(m >= 1 && input.batchSize % m == 0, "m=" << m << " does not divide the batch " << input.batchSize);
  const double b = static_cast<double>(input.batchSize) / m;
  const StageProfile& consumer = input.stages.back();
  const double perConsumer = consumer.forwardSeconds.at(b) + consumer.backwardSeconds.at(b);
  const double c = producers * m * perConsumer;
  double slowest = 0, firstArrival = std::numeric_limits<double>::infinity(), lastArrival = 0, wire = 0, ack = 0;
  double bytes = 0, stash = consumer.stashBytesPerSample * b;
  for (int p = 0; p < producers; ++p) {
    const StageProfile& s = input.stages[p];
    const LinkProfile& link = input.links[p];
    const double perMicroBatch = s.forwardSeconds.at(b) + s.backwardSeconds.at(b);
    const double x = link.transferSeconds(s.outputBytes.at(b));
    slowest = std::max(slowest, m * perMicroBatch);
    firstArrival = std::min(firstArrival, perMicroBatch + x + link.delaySeconds);
    lastArrival = std::max(lastArrival, m * perMicroBatch + x + link.delaySeconds);
    wire = std::max(wire, m * x);
    ack = std::max(ack, link.delaySeconds);
    bytes += m * s.outputBytes.at(b);
    stash = std::max(stash, s.stashBytesPerSample * b);
  }
  const double wave = std::max(firstArrival + c, lastArrival + perConsumer) + ack;
  PlanRow row;
  row.microBatches = m;
  row.stepSeconds = maxStaleness == 0 ? wave : std::max({slowest, c, wire, wave / (maxStaleness + 1)});
  row.bubbleRatio = row.stepSeconds > 0 ? std::max(0.0, 1.0 - c / row.stepSeconds) : 0.0;
  row.bytesPerStep = bytes;
  row.stashBytes = stash;
  row.fits = input.memoryBudgetBytes <= 0 || stash <= input.memoryBudgetBytes;
  return row;
}

Plan makeFanInPlan(const PlannerInput& input, int maxStaleness) {
  Plan plan;
  for (int m = 1; m <= input.batchSize; ++m) {
    if (input.batchSize % m != 0 || (input.microBatches && *input.microBatches != m)) continue;
    plan.table.push_back(evaluateFanIn(input, m, maxStaleness));
  }
  const PlanRow* best = nullptr;
  for (const auto& row : plan.table) {
    // Within 0.5%: the smaller m (fewer, larger products, fewer frames).
    if (row.fits && (!best || row.stepSeconds < best->stepSeconds * 0.995)) best = &row;
  }
  if (!best) throw Error("no micro-batch count fits the memory budget of the fan-in's stages");
  plan.chosen = *best;
  return plan;
}

}  // namespace skytrain::scheduler
