#include "scheduler/planner.h"

#include <cmath>
#include <limits>

#include "scheduler/error.h"
#include "scheduler/simulator.h"

namespace skytrain::scheduler {
namespace {

constexpr double kTie = 0.005;

// GPipe's closed form is exact when every stage and every link costs the same.
bool uniform(const PipelineCosts& c) {
  auto same = [](double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(1.0, std::abs(a)); };
  for (const auto& s : c.stages) {
    if (!same(s.forwardSeconds, c.stages[0].forwardSeconds) || !same(s.backwardSeconds, c.stages[0].backwardSeconds)) {
      return false;
    }
  }
  for (const auto& l : c.links) {
    if (!same(l.forwardSeconds, c.links[0].forwardSeconds) || !same(l.backwardSeconds, l.forwardSeconds) ||
        !same(l.delaySeconds, c.links[0].delaySeconds)) {
      return false;
    }
  }
  return true;
}

}  // namespace

PlanRow evaluate(const PlannerInput& input, int m, ScheduleKind kind) {
  const int p = static_cast<int>(input.stages.size());
  const double b = static_cast<double>(input.batchSize) / m;
  // The replicas' pipelines send at once over the same link between clouds: each gets
  // 1/R of its bandwidth (the probe measured it alone).
  std::vector<LinkProfile> links = input.links;
  for (auto& link : links) link.bandwidthBytesPerSecond /= std::max(1, input.replicas);
  const PipelineCosts costs = costsAt(input.stages, links, b);
  PlanRow row;
  row.microBatches = m;
  row.schedule = kind;
  if (kind == ScheduleKind::OneFOneBDelayAware || kind == ScheduleKind::ZeroBubbleH1) {
    row.warmups = delayAwareWarmups(costs, m);
  }
  const Schedule schedule = makeSchedule(kind, p, m, row.warmups);
  row.warmups = schedule.warmups;
  if (input.delayedUpdate) {
    if (kind == ScheduleKind::GPipe) throw Error("planner: the delayed update needs a 1F1B-kind schedule, not gpipe");
    row.stepSeconds = delayedStepSeconds(schedule, costs);
  } else if (kind == ScheduleKind::GPipe && p > 1 && uniform(costs)) {
    const auto& s = costs.stages[0];
    row.stepSeconds = gpipeStepSeconds(p, m, s.forwardSeconds, s.backwardSeconds, costs.links[0].forwardSeconds,
                                       costs.links[0].delaySeconds);
  } else {
    row.stepSeconds = simulate(schedule, costs).stepSeconds;
  }
  // A replicated stage averages its gradients after its last backward; counted after the
  // pipeline drains, not overlapped with the other stages' drain (an upper bound).
  for (const auto& s : input.stages) row.allReduceSeconds = std::max(row.allReduceSeconds, s.allReduceSeconds);
  row.stepSeconds += row.allReduceSeconds;
  // Tied matrices: after the drain, the first holder's gradient goes down link by link and
  // the sum comes back up, one frame each way per link, in sequence.
  for (size_t k = 0; k < input.tiedBytes.size() && k < links.size(); ++k) {
    if (input.tiedBytes[k] > 0) row.tiedSeconds += 2 * (links[k].transferSeconds(input.tiedBytes[k]) + links[k].delaySeconds);
  }
  row.stepSeconds += row.tiedSeconds;
  double work = 0;
  for (const auto& s : costs.stages) work += m * (s.forwardSeconds + s.backwardSeconds);
  row.bubbleRatio = row.stepSeconds > 0 ? 1.0 - work / (p * row.stepSeconds) : 0.0;
  for (int s = 0; s + 1 < p; ++s) {
    row.bytesPerStep += input.replicas * m * (input.stages[s].outputBytes.at(b) + input.stages[s + 1].gradientBytes.at(b));
    if (static_cast<size_t>(s) < input.tiedBytes.size()) row.bytesPerStep += 2.0 * input.replicas * input.tiedBytes[s];
  }
  for (int s = 0; s < p; ++s) {
    int inFlight = kind == ScheduleKind::GPipe ? m : std::min(m, schedule.warmups[s] + 1);
    // ZB-H1's pending W passes hold each linear layer's input and output gradient: about a
    // micro-batch's stash each.
    if (kind == ScheduleKind::ZeroBubbleH1) inFlight += std::min(m, schedule.maxPendingWeights(s));
    row.stashBytes = std::max(row.stashBytes, inFlight * b * input.stages[s].stashBytesPerSample);
  }
  row.fits = input.memoryBudgetBytes <= 0 || row.stashBytes <= input.memoryBudgetBytes;
  return row;
}

PlannerInput withCodecs(const PlannerInput& input, const std::vector<std::pair<int, int>>& choice) {
  PlannerInput out = input;
  out.forwardCodecs.clear();
  out.backwardCodecs.clear();
  for (size_t link = 0; link < choice.size() && link + 1 < out.stages.size(); ++link) {
    if (link < input.forwardCodecs.size() && !input.forwardCodecs[link].empty()) {
      const CodecOption& c = input.forwardCodecs[link].at(static_cast<size_t>(choice[link].first));
      out.stages[link].forwardSeconds.a += c.seconds.a;
      out.stages[link].forwardSeconds.k += c.seconds.k;
      out.stages[link].outputBytes = c.bytes;
    }
    if (link < input.backwardCodecs.size() && !input.backwardCodecs[link].empty()) {
      const CodecOption& c = input.backwardCodecs[link].at(static_cast<size_t>(choice[link].second));
      out.stages[link + 1].backwardSeconds.a += c.seconds.a;
      out.stages[link + 1].backwardSeconds.k += c.seconds.k;
      out.stages[link + 1].gradientBytes = c.bytes;
    }
  }
  return out;
}

namespace {

Plan planFixedCodecs(const PlannerInput& input);

// Every combination of the links' codec options, in order of preference; the one whose
// best (m, schedule) is fastest wins, ties within 1% going to the earlier combination.
Plan planWithCodecs(const PlannerInput& input) {
  const size_t links = input.links.size();
  auto options = [&](const std::vector<std::vector<CodecOption>>& all, size_t link) {
    return link < all.size() && !all[link].empty() ? static_cast<int>(all[link].size()) : 1;
  };
  std::vector<std::pair<int, int>> choice(links, {0, 0});
  constexpr size_t kMaxCombinations = 4096;
  size_t combinations = 1;
  for (size_t l = 0; l < links; ++l) {
    combinations *= static_cast<size_t>(options(input.forwardCodecs, l) * options(input.backwardCodecs, l));
    if (combinations > kMaxCombinations) throw Error("planner: more than 4096 codec combinations; allow fewer codecs");
  }
  auto names = [&](PlanRow& row, const std::vector<std::pair<int, int>>& c) {
    row.forwardCodecs.clear();
    row.backwardCodecs.clear();
    for (size_t l = 0; l < links; ++l) {
      row.forwardCodecs.push_back(l < input.forwardCodecs.size() && !input.forwardCodecs[l].empty()
                                      ? input.forwardCodecs[l][static_cast<size_t>(c[l].first)].name
                                      : "");
      row.backwardCodecs.push_back(l < input.backwardCodecs.size() && !input.backwardCodecs[l].empty()
                                       ? input.backwardCodecs[l][static_cast<size_t>(c[l].second)].name
                                       : "");
    }
  };
  std::optional<Plan> best;
  std::vector<PlanRow> others;
  std::optional<Error> lastError;
  for (size_t n = 0; n < combinations; ++n) {
    size_t rest = n;  // mixed-radix digits: link 0's forward option varies fastest
    for (size_t l = 0; l < links; ++l) {
      const int f = options(input.forwardCodecs, l), b = options(input.backwardCodecs, l);
      choice[l] = {static_cast<int>(rest % f), static_cast<int>((rest / f) % b)};
      rest /= static_cast<size_t>(f * b);
    }
    Plan plan;
    try {
      plan = planFixedCodecs(withCodecs(input, choice));
    } catch (const Error& e) {  // nothing fits the memory budget under this combination
      lastError = e;
      continue;
    }
    names(plan.chosen, choice);
    for (auto& row : plan.table) names(row, choice);
    if (!best || plan.chosen.stepSeconds < best->chosen.stepSeconds * (1 - 0.01)) {
      if (best) others.push_back(best->chosen);
      best = std::move(plan);
    } else {
      others.push_back(plan.chosen);
    }
  }
  if (!best) throw *lastError;
  best->table.insert(best->table.end(), others.begin(), others.end());
  return *best;
}

Plan planFixedCodecs(const PlannerInput& input) {
  if (input.schedules.empty()) throw Error("planner: no candidate schedule");
  Plan plan;
  double smallestStash = std::numeric_limits<double>::infinity();
  double fastest = std::numeric_limits<double>::infinity();
  for (int m = 1; m <= input.batchSize; ++m) {
    if (input.batchSize % m != 0 || (input.microBatches && m != *input.microBatches)) continue;
    for (ScheduleKind kind : input.schedules) {
      // GPipe's steps cannot overlap; ZB-H1 with the delayed update is not built.
      if (input.delayedUpdate && (kind == ScheduleKind::GPipe || kind == ScheduleKind::ZeroBubbleH1)) continue;
      PlanRow row = evaluate(input, m, kind);
      smallestStash = std::min(smallestStash, row.stashBytes);
      if (row.fits) fastest = std::min(fastest, row.stepSeconds);
      plan.table.push_back(row);
    }
  }
  // Ties (within 0.5% of the fastest row, not of each other: no drift along a chain of
  // near-ties) go to the smaller activation stash: same speed, less memory.
  bool found = false;
  for (const PlanRow& row : plan.table) {
    if (!row.fits || row.stepSeconds > fastest * (1 + kTie)) continue;
    const bool lighter = row.stashBytes < plan.chosen.stashBytes ||
                         (row.stashBytes == plan.chosen.stashBytes && row.stepSeconds < plan.chosen.stepSeconds);
    if (!found || lighter) {
      plan.chosen = row;
      found = true;
    }
  }
  if (!found && plan.table.empty()) throw Error("planner: no candidate schedule for the delayed update (it needs 1F1B)");
  if (!found) {
    throw Error("planner: no micro-batch count fits the memory budget of " + std::to_string(input.memoryBudgetBytes) +
                " bytes (the smallest activation stash needs " + std::to_string(smallestStash) + ")");
  }
  return plan;
}

}  // namespace

Plan makePlan(const PlannerInput& input) {
  if (input.stages.empty() || input.links.size() + 1 != input.stages.size()) {
    throw Error("planner: needs p stage profiles and p-1 link profiles");
  }
  if (input.schedules.empty()) throw Error("planner: no candidate schedule");
  bool choosing = false;
  for (const auto& o : input.forwardCodecs) choosing = choosing || !o.empty();
  for (const auto& o : input.backwardCodecs) choosing = choosing || !o.empty();
  return choosing ? planWithCodecs(input) : planFixedCodecs(input);
}

bool ReplanMonitor::observe(double predicted, double measured) {
  const bool off = predicted > 0 && std::abs(measured - predicted) > tolerance_ * predicted;
  streak_ = off ? streak_ + 1 : 0;
  if (streak_ >= patience_) {
    streak_ = 0;
    return true;
  }
  return false;
}

}  // namespace skytrain::scheduler
