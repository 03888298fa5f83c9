#include "scheduler/cost_model.h"

#include <algorithm>

#include "scheduler/error.h"

namespace skytrain::scheduler {

LinearFit fitLinear(const std::vector<std::pair<double, double>>& points) {
  if (points.empty()) throw Error("fitLinear: no points");
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double n = static_cast<double>(points.size());
  const double variance = sxx - sx * sx / n;
  if (variance <= 1e-12 * std::max(1.0, sxx)) return {std::max(0.0, sy / n), 0.0};
  const double k = (sxy - sx * sy / n) / variance;
  if (k < 0) return {std::max(0.0, sy / n), 0.0};  // flat: the best constant
  // The intercept through the smallest b's point, not least squares': the large sizes' noise
  // (a few percent of tens of ms) would swamp a per-micro-batch cost of a millisecond, and
  // the planner would then take many micro-batches as free. Exact data gives the same line.
  const auto smallest = *std::min_element(points.begin(), points.end());
  const double a = smallest.second - k * smallest.first;
  if (a < 0) return {0.0, sxx > 0 ? sxy / sxx : 0.0};  // through the origin
  return {a, k};
}

PipelineCosts costsAt(const std::vector<StageProfile>& stages, const std::vector<LinkProfile>& links, double b) {
  SKYTRAIN_CHECK(links.size() + 1 == stages.size(), links.size() << " links for " << stages.size() << " stages");
  PipelineCosts costs;
  for (const auto& s : stages) {
    const double backward = s.backwardSeconds.at(b);
    costs.stages.push_back({s.forwardSeconds.at(b), backward, std::min(backward, s.weightSeconds.at(b))});
  }
  for (size_t i = 0; i < links.size(); ++i) {
    costs.links.push_back({links[i].transferSeconds(stages[i].outputBytes.at(b)),
                           links[i].transferSeconds(stages[i + 1].gradientBytes.at(b)), links[i].delaySeconds});
  }
  return costs;
}

}  // namespace skytrain::scheduler
