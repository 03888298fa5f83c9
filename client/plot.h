// `skytrain plot`: a job's curves as one SVG — train and validation loss, tokens/s, and
// bytes on the wire (and uncompressed) per step — against step or wall-clock time, with
// several jobs on the same axes for comparison. Pure: JSON in, SVG text out.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace skytrain::client {

enum class PlotAxis { Step, WallClock };

struct PlotOptions {
  PlotAxis x = PlotAxis::Step;
  int width = 960;
  size_t maxPoints = 1500;  // a longer series is averaged into this many points
};

// jobs: status objects as the daemon returns them (with "steps" from step 0, and "evals").
// Throws skytrain::Error when there is nothing to plot.
std::string renderPlot(const std::vector<nlohmann::json>& jobs, const PlotOptions& options);

}  // namespace skytrain::client
