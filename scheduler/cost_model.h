// What a step costs: per-stage compute and per-link transfer, as measured by profiling and
// fitted to t(b) = a + k*b. Pure C++; the planner and the simulator read it.
#pragma once

#include <utility>
#include <vector>

namespace skytrain::scheduler {

// y = a + k * b with a >= 0 and k >= 0: every cost it models (seconds, bytes) is
// non-negative, and a free fit through noisy points can cross zero. k is the least-squares
// slope, a the intercept through the point of the smallest b (fitLinear).
struct LinearFit {
  double a = 0;
  double k = 0;
  double at(double b) const { return a + k * b; }
};
// Throws skytrain::Error on fewer than one point; one point (or one distinct b) fits k=0.
LinearFit fitLinear(const std::vector<std::pair<double, double>>& points);

// One stage's costs for a micro-batch of b samples.
struct StageProfile {
  LinearFit forwardSeconds;   // forward, including decoding the input and encoding the output
  LinearFit backwardSeconds;  // backward, including the gradient's codec work
  LinearFit weightSeconds;    // the part of backward a ZB-H1 W pass takes (0: cannot split)
  LinearFit outputBytes;      // forward frame bytes on the wire (header + compressed payload)
  LinearFit gradientBytes;    // backward frame bytes this stage sends upstream
  double stashBytesPerSample = 0;  // activation memory held per in-flight sample
  double allReduceSeconds = 0;     // averaging a step's gradients over the stage's copies (measured)
};

// One link between neighbouring stages; full duplex, the same in both directions.
struct LinkProfile {
  double bandwidthBytesPerSecond = 1e9;
  double delaySeconds = 0;     // one-way propagation
  double overheadSeconds = 0;  // per message
  double transferSeconds(double bytes) const { return overheadSeconds + bytes / bandwidthBytesPerSecond; }
};

// Concrete costs of one step at a fixed micro-batch size: what the simulator runs on.
struct StageCost {
  double forwardSeconds = 0;
  double backwardSeconds = 0;  // the whole backward, W pass included
  double weightSeconds = 0;    // of which the W pass under ZB-H1
};
struct LinkCost {
  double forwardSeconds = 0;   // x of an activation message: overhead + bytes / bandwidth
  double backwardSeconds = 0;  // x of a gradient message
  double delaySeconds = 0;     // d, one-way
};
struct PipelineCosts {
  std::vector<StageCost> stages;
  std::vector<LinkCost> links;  // links[s] joins stage s and s+1
};

// The costs at micro-batch size b (samples).
PipelineCosts costsAt(const std::vector<StageProfile>& stages, const std::vector<LinkProfile>& links, double b);

}  // namespace skytrain::scheduler
