#include "client/plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "scheduler/error.h"

namespace skytrain::client {
namespace {

using nlohmann::json;

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
constexpr int kPanelHeight = 230, kPanelGap = 56, kLeft = 78, kRight = 24, kTop = 96;

struct Point {
  double x, y;
};
struct Series {
  std::vector<Point> points;
  std::string color, dash;
  bool markers = false;
};
struct Panel {
  std::string title, unit;
  bool fromZero = false;  // rates and sizes: the axis starts at zero, so ratios read true
  std::vector<Series> series;
};

std::string escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t') out += c;  // no control characters in XML
    }
  }
  return out;
}

std::string number(double v) {
  char text[32];
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-3)) {
    std::snprintf(text, sizeof text, "%.3g", v);
  } else {
    std::snprintf(text, sizeof text, "%.6g", v);
  }
  return text;
}

// Round tick positions covering [lo, hi]: steps of 1, 2 or 5 times a power of ten.
std::vector<double> ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9 && out.size() < 20; t += step) {
    out.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return out;
}

// Averages a long series into at most `limit` points (bucket means of x and y).
std::vector<Point> thin(const std::vector<Point>& points, size_t limit) {
  if (points.size() <= limit) return points;
  std::vector<Point> out;
  const double per = static_cast<double>(points.size()) / static_cast<double>(limit);
  for (size_t b = 0; b < limit; ++b) {
    const size_t from = static_cast<size_t>(b * per), to = std::min(points.size(), static_cast<size_t>((b + 1) * per));
    double x = 0, y = 0;
    for (size_t i = from; i < to; ++i) {
      x += points[i].x;
      y += points[i].y;
    }
    if (to > from) out.push_back({x / static_cast<double>(to - from), y / static_cast<double>(to - from)});
  }
  return out;
}

double numberOr(const json& row, const char* key, double fallback) {
  const auto it = row.find(key);
  return it != row.end() && it->is_number() ? it->get<double>() : fallback;
}

std::string renderPanel(const Panel& panel, int index, int width, const std::string& xLabel) {
  const int plotWidth = width - kLeft - kRight;
  const int top = kTop + index * (kPanelHeight + kPanelGap);
  double xLo = std::numeric_limits<double>::infinity(), xHi = -xLo, yLo = xLo, yHi = -xLo;
  for (const auto& s : panel.series) {
    for (const auto& p : s.points) {
      xLo = std::min(xLo, p.x), xHi = std::max(xHi, p.x), yLo = std::min(yLo, p.y), yHi = std::max(yHi, p.y);
    }
  }
  std::string out = "<g transform=\"translate(" + std::to_string(kLeft) + "," + std::to_string(top) + ")\">\n";
  out += "<text x=\"0\" y=\"-10\" font-size=\"14\" font-weight=\"bold\">" + escape(panel.title) + "</text>\n";
  out += "<rect width=\"" + std::to_string(plotWidth) + "\" height=\"" + std::to_string(kPanelHeight) +
         "\" fill=\"#fafafa\" stroke=\"#999\"/>\n";
  if (!std::isfinite(xLo)) {
    out += "<text x=\"" + std::to_string(plotWidth / 2) + "\" y=\"" + std::to_string(kPanelHeight / 2) +
           "\" text-anchor=\"middle\" fill=\"#666\">no data</text>\n</g>\n";
    return out;
  }
  if (xHi - xLo < 1e-12) xHi = xLo + 1;
  const double pad = yHi - yLo < 1e-12 ? std::max(1e-9, std::fabs(yHi) * 0.1 + 1e-9) : (yHi - yLo) * 0.05;
  yLo -= pad, yHi += pad;
  if (panel.fromZero || (yLo < 0 && yLo + pad >= 0)) yLo = 0;
  auto px = [&](double x) { return (x - xLo) / (xHi - xLo) * plotWidth; };
  auto py = [&](double y) { return kPanelHeight - (y - yLo) / (yHi - yLo) * kPanelHeight; };
  char text[256];
  for (const double t : ticks(yLo, yHi)) {
    std::snprintf(text, sizeof text,
                  "<line x1=\"0\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"-6\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"middle\">%s</text>\n",
                  plotWidth, py(t), py(t), py(t), number(t).c_str());
    out += text;
  }
  for (const double t : ticks(xLo, xHi)) {
    std::snprintf(text, sizeof text,
                  "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"0\" y2=\"%d\" stroke=\"#eee\"/>"
                  "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                  px(t), px(t), kPanelHeight, px(t), kPanelHeight + 16, number(t).c_str());
    out += text;
  }
  std::snprintf(text, sizeof text, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#444\">%s</text>\n",
                plotWidth / 2, kPanelHeight + 34, escape(xLabel).c_str());
  out += text;
  std::snprintf(text, sizeof text,
                "<text transform=\"translate(-60,%d) rotate(-90)\" text-anchor=\"middle\" fill=\"#444\">%s</text>\n",
                kPanelHeight / 2, escape(panel.unit).c_str());
  out += text;
  for (const auto& s : panel.series) {
    if (s.points.empty()) continue;
    // Translucent, so a job whose curve lies under another's still shows.
    out += "<polyline fill=\"none\" stroke=\"" + s.color + "\" stroke-opacity=\"0.8\" stroke-width=\"1.6\"" +
           (s.dash.empty() ? "" : " stroke-dasharray=\"" + s.dash + "\"") + " points=\"";
    for (const auto& p : s.points) {
      std::snprintf(text, sizeof text, "%.1f,%.1f ", px(p.x), py(p.y));
      out += text;
    }
    out += "\"/>\n";
    if (!s.markers) continue;
    for (const auto& p : s.points) {
      std::snprintf(text, sizeof text, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", px(p.x), py(p.y),
                    s.color.c_str());
      out += text;
    }
  }
  return out + "</g>\n";
}

}  // namespace

std::string renderPlot(const std::vector<json>& jobs, const PlotOptions& options) {
  Panel loss{"Loss: train (solid), validation (dashed, dots)", "loss", false, {}};
  Panel rate{"Throughput", "tokens/s", true, {}};
  Panel bytes{"Sent per step: on the wire (solid), uncompressed (dotted)", "MB per step", true, {}};
  std::string legend;
  size_t rows = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const json& job = jobs[j];
    const std::string color = kColors[j % (sizeof kColors / sizeof kColors[0])];
    const json& steps = job.at("steps");
    // Wall-clock: seconds since the first step began.
    double start = steps.empty() ? 0 : numberOr(steps[0], "time", 0) - numberOr(steps[0], "step_s", 0);
    double elapsed = 0;
    auto xOf = [&](const json& row) {
      if (options.x == PlotAxis::Step) return numberOr(row, "step", 0);
      if (row.contains("time")) return numberOr(row, "time", 0) - start;
      return elapsed;  // records from before steps were timed: the sum of step times
    };
    std::vector<Point> train, tokens, wire, raw;
    for (const auto& row : steps) {
      elapsed += numberOr(row, "step_s", 0);
      const double x = xOf(row);
      const double l = numberOr(row, "loss", NAN);
      if (std::isfinite(l)) train.push_back({x, l});
      tokens.push_back({x, numberOr(row, "tokens_per_s", 0)});
      wire.push_back({x, numberOr(row, "bytes_sent", 0) / 1e6});
      raw.push_back({x, numberOr(row, "bytes_raw", 0) / 1e6});
    }
    rows += steps.size();
    std::vector<Point> validation;
    for (const auto& eval : job.value("evals", json::array())) {
      const double l = numberOr(eval, "loss", NAN);
      if (!std::isfinite(l)) continue;
      double x = numberOr(eval, "step", 0);
      if (options.x == PlotAxis::WallClock) x = eval.contains("time") ? numberOr(eval, "time", 0) - start : NAN;
      if (std::isfinite(x)) validation.push_back({x, l});
    }
    loss.series.push_back({thin(train, options.maxPoints), color, "", false});
    loss.series.push_back({validation, color, "6,4", true});
    rate.series.push_back({thin(tokens, options.maxPoints), color, "", false});
    bytes.series.push_back({thin(wire, options.maxPoints), color, "", false});
    bytes.series.push_back({thin(raw, options.maxPoints), color, "2,3", false});
    char entry[512];
    std::snprintf(entry, sizeof entry,
                  "<rect x=\"%d\" y=\"%zu\" width=\"14\" height=\"4\" fill=\"%s\"/>"
                  "<text x=\"%d\" y=\"%zu\">%s \"%s\": %s, %zu steps</text>\n",
                  kLeft, 44 + 16 * j, color.c_str(), kLeft + 20, 50 + 16 * j,
                  escape(job.value("id", std::string("?"))).c_str(), escape(job.value("name", std::string())).c_str(),
                  escape(job.value("state", std::string())).c_str(), steps.size());
    legend += entry;
  }
  if (rows == 0) throw Error("nothing to plot: the jobs have no completed steps yet");
  const std::string xLabel = options.x == PlotAxis::Step ? "step" : "seconds since the first step began";
  const int extra = static_cast<int>(16 * (jobs.size() > 2 ? jobs.size() - 2 : 0));
  const int height = kTop + extra + 3 * (kPanelHeight + kPanelGap);
  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    std::to_string(options.width) + "\" height=\"" + std::to_string(height) + "\" viewBox=\"0 0 " +
                    std::to_string(options.width) + " " + std::to_string(height) +
                    "\" font-family=\"DejaVu Sans, sans-serif\" font-size=\"12\">\n"
                    "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
                    "<text x=\"" + std::to_string(kLeft) + "\" y=\"26\" font-size=\"18\" font-weight=\"bold\">skytrain: " +
                    std::to_string(jobs.size()) + (jobs.size() == 1 ? " job" : " jobs") + " against " + xLabel +
                    "</text>\n" + legend + "<g transform=\"translate(0," + std::to_string(extra) + ")\">\n";
  int index = 0;
  for (const Panel* panel : {&loss, &rate, &bytes}) svg += renderPanel(*panel, index++, options.width, xLabel);
  return svg + "</g>\n</svg>\n";
}

}  // namespace skytrain::client
