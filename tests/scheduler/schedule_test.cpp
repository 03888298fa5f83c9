#include <catch2/catch.hpp>

#include "scheduler/error.h"
#include "scheduler/schedule.h"

using namespace skytrain::scheduler;

namespace {
std::string render(const std::vector<Op>& ops) {
  std::string out;
  for (const auto& op : ops) out += (out.empty() ? "" : " ") + toString(op);
  return out;
}
}  // namespace

TEST_CASE("GPipe runs all forwards, then all backwards in reverse") {
  const auto s = makeSchedule(ScheduleKind::GPipe, 3, 4);
  REQUIRE(s.stages() == 3);
  for (int stage = 0; stage < 3; ++stage) CHECK(render(s.ops[stage]) == "F0 F1 F2 F3 B3 B2 B1 B0");
}

TEST_CASE("1F1B warms up p-s-1 forwards, alternates, then drains") {
  const auto s = makeSchedule(ScheduleKind::OneFOneB, 3, 4);
  CHECK(render(s.ops[0]) == "F0 F1 F2 B0 F3 B1 B2 B3");
  CHECK(render(s.ops[1]) == "F0 F1 B0 F2 B1 F3 B2 B3");
  CHECK(render(s.ops[2]) == "F0 B0 F1 B1 F2 B2 F3 B3");
}

TEST_CASE("1F1B with fewer micro-batches than stages warms up with all of them") {
  const auto s = makeSchedule(ScheduleKind::OneFOneB, 4, 2);
  CHECK(render(s.ops[0]) == "F0 F1 B0 B1");
  CHECK(render(s.ops[3]) == "F0 B0 F1 B1");
}

TEST_CASE("every generated schedule is complete and deadlock-free") {
  const auto kind = GENERATE(ScheduleKind::GPipe, ScheduleKind::OneFOneB);
  const int p = GENERATE(1, 2, 3, 5, 8);
  const int m = GENERATE(1, 2, 3, 4, 7, 16);
  CAPTURE(toString(kind), p, m);
  CHECK(validateSchedule(makeSchedule(kind, p, m)).empty());
}

TEST_CASE("validateSchedule finds deadlocks and missing ops") {
  Schedule s = makeSchedule(ScheduleKind::GPipe, 2, 2);
  s.ops[1] = {{OpKind::Backward, 0}, {OpKind::Forward, 0}, {OpKind::Forward, 1}, {OpKind::Backward, 1}};
  CHECK(validateSchedule(s).find("deadlock") != std::string::npos);
  s = makeSchedule(ScheduleKind::GPipe, 2, 2);
  s.ops[0].pop_back();
  CHECK(validateSchedule(s).find("micro-batch 0") != std::string::npos);
}

TEST_CASE("schedule names parse and bad sizes are refused") {
  CHECK(parseScheduleKind("gpipe") == ScheduleKind::GPipe);
  CHECK(parseScheduleKind("1f1b") == ScheduleKind::OneFOneB);
  CHECK(parseScheduleKind("zb-h1") == ScheduleKind::ZeroBubbleH1);
  CHECK(toString(ScheduleKind::ZeroBubbleH1) == "zb-h1");
  CHECK_FALSE(parseScheduleKind("pipedream").has_value());
  CHECK_THROWS_AS(makeSchedule(ScheduleKind::GPipe, 0, 4), skytrain::Error);
  CHECK_THROWS_AS(makeSchedule(ScheduleKind::OneFOneB, 2, 0), skytrain::Error);
}

TEST_CASE("delayed update: a round interleaves this step's warm-up with the previous step's deferred backwards") {
  // Stage 0 of three under 1F1B (warm-up 2), m = 4.
  CHECK(render(delayedRoundOps(2, 4, false, false)) == render(makeSchedule(ScheduleKind::OneFOneB, 3, 4).ops[0]));
  CHECK(render(delayedRoundOps(2, 4, false, true)) == "F0 F1 F2 B0 F3 B1");
  CHECK(render(delayedRoundOps(2, 4, true, true)) == "F0 B2' F1 B3' F2 B0 F3 B1");
  CHECK(render(delayedRoundOps(2, 4, true, false)) == "F0 B2' F1 B3' F2 B0 F3 B1 B2 B3");
  // The last stage defers nothing.
  CHECK(render(delayedRoundOps(0, 3, true, true)) == "F0 B0 F1 B1 F2 B2");
  CHECK_THROWS_AS(delayedRoundOps(1, 0, false, false), skytrain::Error);
}

TEST_CASE("delayed update: every stream of rounds is complete and deadlock-free") {
  const int p = GENERATE(1, 2, 3, 5);
  const int m = GENERATE(1, 2, 3, 4, 8);
  const int rounds = GENERATE(1, 2, 5);
  CAPTURE(p, m, rounds);
  const Schedule plain = makeSchedule(ScheduleKind::OneFOneB, p, m);
  const Schedule stream = delayedStream(plain, rounds);
  CHECK(stream.microBatches == m * rounds);
  CHECK(validateSchedule(stream).empty());
  // Deep warm-ups (a long link's 1f1b-delay), up to every micro-batch on every stage but the last.
  std::vector<int> deep(p, m);
  deep[p - 1] = 0;
  CHECK(validateSchedule(delayedStream(makeSchedule(ScheduleKind::OneFOneBDelayAware, p, m, deep), rounds)).empty());
  CHECK_THROWS_AS(delayedStream(makeSchedule(ScheduleKind::GPipe, p, m), rounds), skytrain::Error);
}
