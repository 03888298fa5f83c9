#include "client/job_printer.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <numeric>

#include "client/format.h"

namespace skytrain::client {
namespace {

constexpr size_t kEtaWindow = 20;  // steps the ETA averages over

std::string duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  } else if (s >= 60) {
    std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%lds", s);
  }
  return text;
}

int terminalColumns(int fd) {
  winsize size{};
  if (ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 20) return size.ws_col;
  return 80;
}

}  // namespace

OutputMode outputModeFor(bool json, int fd) {
  if (json) return OutputMode::Json;
  return isatty(fd) ? OutputMode::Bar : OutputMode::Lines;
}

JobPrinter::JobPrinter(std::ostream& out, OutputMode mode, int terminalColumnsOverride)
    : out_(out), mode_(mode), columns_(terminalColumnsOverride > 0 ? terminalColumnsOverride : terminalColumns(1)) {}

void JobPrinter::clearBar() {
  if (!barShown_) return;
  out_ << "\r\033[K";
  barShown_ = false;
}

void JobPrinter::line(const std::string& text) {
  clearBar();
  out_ << text;
  if (text.empty() || text.back() != '\n') out_ << "\n";
  out_.flush();
}

void JobPrinter::json(const char* type, nlohmann::json value) {
  value["type"] = type;
  out_ << value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  out_.flush();
}

void JobPrinter::plan(const nlohmann::json& plan, bool first) {
  if (mode_ == OutputMode::Json) return json("plan", plan);
  line(std::string(first ? "plan:\n" : "new plan:\n") + formatPlan(plan));
}

void JobPrinter::event(const nlohmann::json& event) {
  if (mode_ == OutputMode::Json) return json("event", event);
  line(formatEvent(event));
}

void JobPrinter::eval(const nlohmann::json& eval) {
  if (mode_ == OutputMode::Json) return json("eval", eval);
  char text[160];
  std::snprintf(text, sizeof text, "validation at step %lld: loss %.4f", static_cast<long long>(eval.value("step", 0)),
                eval.value("loss", 0.0));
  std::string message = text;
  if (eval.contains("accuracy")) message += ", accuracy " + std::to_string(eval["accuracy"].get<double>());
  if (eval.contains("bleu")) message += ", BLEU " + std::to_string(eval["bleu"].get<double>());
  line(message);
}

void JobPrinter::step(const nlohmann::json& row, int stepsTotal) {
  if (mode_ == OutputMode::Json) return json("step", row);
  if (mode_ == OutputMode::Lines) return line(formatStep(row, stepsTotal));
  // Wall time between completed steps (evals and checkpoints included), else the step time.
  const double now = row.value("time", 0.0);
  const double gap = lastStepTime_ > 0 && now > lastStepTime_ ? now - lastStepTime_ : row.value("step_s", 0.0);
  lastStepTime_ = now;
  recentStepSeconds_.push_back(gap);
  if (recentStepSeconds_.size() > kEtaWindow) recentStepSeconds_.pop_front();
  const double mean = std::accumulate(recentStepSeconds_.begin(), recentStepSeconds_.end(), 0.0) /
                      static_cast<double>(recentStepSeconds_.size());
  out_ << "\r\033[K" << bar(row, stepsTotal, mean, columns_);
  out_.flush();
  barShown_ = true;
}

std::string JobPrinter::bar(const nlohmann::json& row, int stepsTotal, double secondsPerStep, int columns) {
  const int done = row.value("step", 0);
  const double fraction = stepsTotal > 0 ? std::min(1.0, static_cast<double>(done) / stepsTotal) : 0.0;
  const auto found = row.find("loss");  // null on a skipped step; absent never, but a reply is not trusted
  const double loss = found != row.end() && found->is_number() ? found->get<double>() : NAN;
  char tail[160];
  std::snprintf(tail, sizeof tail, " %d/%d %3.0f%%  ETA %s  loss %.4f  %.0f tok/s", done, stepsTotal, 100 * fraction,
                duration(secondsPerStep * (stepsTotal - done)).c_str(), loss, row.value("tokens_per_s", 0.0));
  const int width = std::max(10, std::min(40, columns - static_cast<int>(std::string(tail).size()) - 3));
  const int filled = static_cast<int>(std::lround(fraction * width));
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]" + tail;
}

void JobPrinter::summary(const nlohmann::json& status) {
  if (mode_ == OutputMode::Json) {
    return json("summary", {{"id", status["id"]}, {"state", status["state"]}, {"error", status["error"]},
                            {"steps_done", status["steps_done"]}, {"summary", status["summary"]}});
  }
  line(formatSummary(status));
}

}  // namespace skytrain::client
