#include <catch2/catch.hpp>

#include <random>

#include "scheduler/error.h"
#include "scheduler/simulator.h"

using namespace skytrain::scheduler;

namespace {

PipelineCosts uniformCosts(int p, double tf, double tb, double x, double d) {
  PipelineCosts c;
  c.stages.assign(p, {tf, tb});
  c.links.assign(p - 1, {x, x, d});
  return c;
}

}  // namespace

TEST_CASE("the simulator matches GPipe's closed form on random configurations") {
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> compute(0.001, 0.1), transfer(0.0, 0.2), delay(0.0, 0.1);
  std::uniform_int_distribution<int> stages(2, 6), microBatches(1, 16);
  for (int trial = 0; trial < 2000; ++trial) {
    const int p = stages(rng), m = microBatches(rng);
    const double tf = compute(rng), tb = compute(rng), x = transfer(rng), d = delay(rng);
    CAPTURE(trial, p, m, tf, tb, x, d);
    const double simulated = simulate(makeSchedule(ScheduleKind::GPipe, p, m), uniformCosts(p, tf, tb, x, d)).stepSeconds;
    REQUIRE(simulated == Approx(gpipeStepSeconds(p, m, tf, tb, x, d)).epsilon(1e-9));
  }
}

TEST_CASE("without communication the bubble ratio is (p-1)/(m+p-1)") {
  const int p = GENERATE(2, 3, 4, 8);
  const int m = GENERATE(1, 2, 4, 16);
  const auto result = simulate(makeSchedule(ScheduleKind::GPipe, p, m), uniformCosts(p, 0.03, 0.05, 0, 0));
  const double expected = static_cast<double>(p - 1) / (m + p - 1);
  CHECK(result.bubbleRatio() == Approx(expected).epsilon(1e-9));
  CHECK(bubbleRatio(m, 0.03, 0.05, result.stepSeconds) == Approx(expected).epsilon(1e-9));
  // 1F1B has GPipe's step time without communication (it only bounds the stash).
  CHECK(simulate(makeSchedule(ScheduleKind::OneFOneB, p, m), uniformCosts(p, 0.03, 0.05, 0, 0)).stepSeconds ==
        Approx(result.stepSeconds).epsilon(1e-9));
}

TEST_CASE("the timeline respects dependencies and each stage's order") {
  const PipelineCosts c = uniformCosts(3, 1.0, 2.0, 0.5, 0.25);
  const auto result = simulate(makeSchedule(ScheduleKind::OneFOneB, 3, 4), c);
  for (int s = 0; s < 3; ++s) {
    REQUIRE(result.timeline[s].size() == 8);
    for (size_t k = 1; k < result.timeline[s].size(); ++k) {
      CHECK(result.timeline[s][k].start >= result.timeline[s][k - 1].end - 1e-12);
    }
    CHECK(result.busySeconds[s] == Approx(4 * 3.0));
  }
  // Stage 1's F0 cannot start before stage 0's F0 ends plus transfer and delay.
  CHECK(result.timeline[1][0].start == Approx(1.0 + 0.5 + 0.25));
}

TEST_CASE("the simulator refuses mismatched costs") {
  CHECK_THROWS_AS(simulate(makeSchedule(ScheduleKind::GPipe, 3, 2), uniformCosts(2, 1, 1, 0, 0)), skytrain::Error);
}

TEST_CASE("delay-aware 1F1B beats plain 1F1B once the round trip exceeds a micro-batch's compute") {
  const int p = 4, m = 8;
  const double tf = 1.0, tb = 1.0;
  for (double d : {0.0, 0.5, 2.0, 5.0}) {
    CAPTURE(d);
    const PipelineCosts c = uniformCosts(p, tf, tb, 0.1, d);
    const double plain = simulate(makeSchedule(ScheduleKind::OneFOneB, p, m), c).stepSeconds;
    const auto warmups = delayAwareWarmups(c, m);
    const Schedule aware = makeSchedule(ScheduleKind::OneFOneBDelayAware, p, m, warmups);
    CHECK(validateSchedule(aware).empty());
    const double delayed = simulate(aware, c).stepSeconds;
    const double roundTrip = 2 * (0.1 + d);
    if (roundTrip > tf + tb) {
      CHECK(delayed < plain * 0.95);
    } else {
      CHECK(delayed <= plain + 1e-9);
    }
  }
  // Free links: the warm-up is plain 1F1B's.
  CHECK(delayAwareWarmups(uniformCosts(4, 1, 1, 0, 0), 8) == std::vector<int>{3, 2, 1, 0});
  CHECK(delayAwareWarmups(uniformCosts(4, 1, 1, 0, 0), 2) == std::vector<int>{2, 2, 1, 0});
}

TEST_CASE("fitLinear recovers a + k b") {
  const LinearFit f = fitLinear({{1, 3.0}, {2, 5.0}, {4, 9.0}});
  CHECK(f.a == Approx(1.0));
  CHECK(f.k == Approx(2.0));
  CHECK(fitLinear({{4, 7.0}}).at(100) == Approx(7.0));
  // Noisy points whose free fit has a negative intercept: the fit goes through the origin.
  const LinearFit origin = fitLinear({{1, 0.5}, {4, 7.0}, {16, 32.0}});
  CHECK(origin.a == 0.0);
  CHECK(origin.k == Approx((0.5 + 28.0 + 512.0) / (1 + 16 + 256)));
  CHECK(fitLinear({{1, 5.0}, {2, 4.0}}).k == 0.0);
  // A per-micro-batch cost of 1 ms under a few ms of noise at the large sizes: least squares
  // puts the intercept below zero here (-0.41 ms); the point at b = 1 keeps it.
  const LinearFit overhead = fitLinear({{1, 1.2}, {64, 13.8 - 3.0}, {128, 26.6 + 1.0}, {256, 52.2 + 2.0}});
  CHECK(overhead.a == Approx(1.2 - overhead.k).margin(1e-12));
  CHECK(overhead.a > 0.9);
  CHECK_THROWS_AS(fitLinear({}), skytrain::Error);
}

TEST_CASE("the delayed update hides the round trip: its steady step approaches the compute") {
  const int p = 2, m = 8;
  const double tf = 1.0, tb = 2.0, x = 0.1;
  for (double d : {0.0, 2.0, 10.0}) {
    CAPTURE(d);
    const PipelineCosts c = uniformCosts(p, tf, tb, x, d);
    const Schedule step = makeSchedule(ScheduleKind::OneFOneBDelayAware, p, m, delayAwareWarmups(c, m));
    const double sync = simulate(step, c).stepSeconds;
    const double delayed = delayedStepSeconds(step, c);
    // No step is shorter than one stage's work, and the delayed update never loses.
    CHECK(delayed >= m * (tf + tb) - 1e-9);
    CHECK(delayed <= sync + 1e-9);
    // A synchronous step pays the fill and drain over the round trip; the stream does not.
    CHECK(sync >= m * (tf + tb) + 2 * d);
    if (d >= 2.0) CHECK(delayed == Approx(m * (tf + tb)).epsilon(1e-9));
  }
  // A link slower than the compute bounds the stream at its transfers.
  const PipelineCosts slow = uniformCosts(p, tf, tb, 5.0, 1.0);
  const Schedule step = makeSchedule(ScheduleKind::OneFOneBDelayAware, p, m, delayAwareWarmups(slow, m));
  CHECK(delayedStepSeconds(step, slow) == Approx(m * 5.0).epsilon(1e-9));
}

TEST_CASE("ZB-H1: W passes fill the waits for frames; no wait, no gain; every W once, after its B") {
  const int p = 2, m = 4;
  PipelineCosts costs = uniformCosts(p, 1.0, 2.0, 0.1, 2.0);  // a round trip of 4.2 against 3 of compute
  for (auto& s : costs.stages) s.weightSeconds = 1.0;
  const auto warmups = delayAwareWarmups(costs, m);
  const Schedule plain = makeSchedule(ScheduleKind::OneFOneBDelayAware, p, m, warmups);
  const Schedule zb = makeSchedule(ScheduleKind::ZeroBubbleH1, p, m, warmups);
  CHECK(validateSchedule(zb).empty());
  CHECK(zb.ops == plain.ops);  // the same F and B order; W passes are not in the list
  const auto split = simulate(zb, costs);
  const double whole = simulate(plain, costs).stepSeconds;
  CHECK(split.stepSeconds < whole - 0.5);
  for (int s = 0; s < p; ++s) {
    CHECK(split.busySeconds[s] == Approx(m * 3.0));  // the same work, B = t_b - t_w plus W = t_w
    std::vector<int> seen;
    std::vector<bool> backwardDone(m, false);
    double last = 0;
    int pending = 0, mostPending = 0;
    for (const OpTiming& t : split.timeline[s]) {
      CHECK(t.start >= last - 1e-12);  // one op at a time
      last = t.end;
      if (t.op.kind == OpKind::Backward) backwardDone[t.op.microBatch] = true, mostPending = std::max(mostPending, ++pending);
      if (t.op.kind == OpKind::Weight) {
        CHECK(backwardDone[t.op.microBatch]);
        seen.push_back(t.op.microBatch);
        --pending;
      }
    }
    CHECK(seen == std::vector<int>{0, 1, 2, 3});  // oldest first, each once
    CHECK(mostPending <= zb.maxPendingWeights(s) + 1);
  }
  // Links with no delay and equal stages leave only the fill and drain: with t_w = 0 the
  // split is exactly 1F1B.
  PipelineCosts free = uniformCosts(p, 1.0, 2.0, 0, 0);
  const auto freeWarmups = delayAwareWarmups(free, m);
  CHECK(simulate(makeSchedule(ScheduleKind::ZeroBubbleH1, p, m, freeWarmups), free).stepSeconds ==
        Approx(simulate(makeSchedule(ScheduleKind::OneFOneBDelayAware, p, m, freeWarmups), free).stepSeconds));
  CHECK_THROWS_WITH(delayedStream(zb, 2), Catch::Contains("not zb-h1"));
}
