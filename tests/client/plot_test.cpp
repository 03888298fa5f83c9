#include <catch2/catch.hpp>

#include <regex>

#include "client/plot.h"
#include "scheduler/error.h"

using namespace skytrain::client;
using nlohmann::json;

namespace {
json job(const std::string& id, const std::string& name, int steps, double lossScale) {
  json j = {{"id", id}, {"name", name}, {"state", "succeeded"}, {"steps", json::array()}, {"evals", json::array()}};
  for (int s = 0; s < steps; ++s) {
    j["steps"].push_back({{"step", s + 1}, {"loss", lossScale * (5.0 - s * 0.01)}, {"tokens_per_s", 1000.0 + s},
                          {"bytes_sent", 1e6}, {"bytes_raw", 2e6}, {"step_s", 0.5}, {"time", 1000.0 + 0.5 * (s + 1)}});
  }
  j["evals"].push_back({{"step", steps}, {"loss", lossScale * 4.0}, {"time", 1000.0 + 0.5 * steps}});
  return j;
}
size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("a plot draws each job's curves in each panel, names escaped") {
  const std::string svg = renderPlot({job("aaaa", "web <&> \"gpt\"", 100, 1.0), job("bbbb", "fp16", 50, 1.1)}, {});
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  // Per job: train loss, validation loss, tokens/s, bytes on the wire, bytes raw.
  CHECK(count(svg, "<polyline") == 10);
  CHECK(count(svg, "<circle") == 2);  // one validation point each
  CHECK(svg.find("web &lt;&amp;&gt; &quot;gpt&quot;") != std::string::npos);
  CHECK(svg.find("web <&>") == std::string::npos);
  CHECK(svg.find("against step") != std::string::npos);
}

TEST_CASE("a plot against wall-clock puts the last step at its elapsed seconds") {
  PlotOptions options;
  options.x = PlotAxis::WallClock;
  const std::string svg = renderPlot({job("aaaa", "x", 40, 1.0)}, options);
  CHECK(svg.find("seconds since the first step began") != std::string::npos);
  // 40 steps of 0.5 s: the x ticks reach 20 seconds.
  CHECK(svg.find(">20</text>") != std::string::npos);
}

TEST_CASE("a long series is averaged down, an empty job is an error") {
  PlotOptions options;
  options.maxPoints = 100;
  const std::string svg = renderPlot({job("aaaa", "x", 5000, 1.0)}, options);
  std::smatch m;
  const std::regex polyline("<polyline[^>]*points=\"([^\"]*)\"");
  REQUIRE(std::regex_search(svg, m, polyline));
  CHECK(count(m[1].str(), ",") == 100);
  CHECK_THROWS_AS(renderPlot({job("aaaa", "x", 0, 1.0)}, {}), skytrain::Error);
}
