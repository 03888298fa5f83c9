// How the CLI writes a job's progress: lines for people — with a progress bar (step, ETA,
// loss, rate) redrawn in place when stdout is a terminal — or JSON lines (--json) for
// programs, one object per plan, event, step, eval and the final summary, each with "type".
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <deque>
#include <ostream>
#include <string>

namespace skytrain::client {

enum class OutputMode { Lines, Bar, Json };

// Bar when `out` is a terminal and JSON was not asked for; Lines otherwise.
OutputMode outputModeFor(bool json, int fd);

class JobPrinter {
 public:
  JobPrinter(std::ostream& out, OutputMode mode, int terminalColumns = 0);

  void plan(const nlohmann::json& plan, bool first);
  void event(const nlohmann::json& event);
  void step(const nlohmann::json& row, int stepsTotal);
  void eval(const nlohmann::json& eval);
  // The job's end: clears the bar and writes the summary (a "summary" object in JSON).
  void summary(const nlohmann::json& status);

  // The bar as drawn for the last step (without the carriage return); for tests.
  static std::string bar(const nlohmann::json& row, int stepsTotal, double secondsPerStep, int columns);

 private:
  void line(const std::string& text);  // above the bar
  void json(const char* type, nlohmann::json value);
  void clearBar();

  std::ostream& out_;
  OutputMode mode_;
  int columns_;
  bool barShown_ = false;
  std::deque<double> recentStepSeconds_;  // wall time between the last steps, for the ETA
  double lastStepTime_ = 0;
};

}  // namespace skytrain::client
