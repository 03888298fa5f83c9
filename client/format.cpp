#include "client/format.h"

#include <cstdio>

namespace skytrain::client {

std::string formatBytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int unit = 0;
  while (bytes >= 1000 && unit < 4) {
    bytes /= 1000;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", bytes, units[unit]);
  return text;
}

std::string formatStep(const nlohmann::json& step, int stepsTotal) {
  char text[200];
  const double loss = step["loss"].is_number() ? step["loss"].get<double>() : 0.0;
  std::snprintf(text, sizeof text, "step %4d/%d  loss %.4f  %8.0f tok/s  sent %s/step (raw %s)  %.3f s",
                step["step"].get<int>() + 1, stepsTotal, loss, step["tokens_per_s"].get<double>(),
                formatBytes(step["bytes_sent"].get<double>()).c_str(),
                formatBytes(step.value("bytes_raw", 0.0)).c_str(), step["step_s"].get<double>());
  return text;
}

std::string formatSummary(const nlohmann::json& job) {
  const auto& s = job["summary"];
  std::string out = "job " + job["id"].get<std::string>() + " " + job["state"].get<std::string>();
  if (!job["error"].get<std::string>().empty()) out += ": " + job["error"].get<std::string>();
  out += "\n";
  if (s.empty()) return out;
  char text[512];
  std::snprintf(text, sizeof text,
                "  steps %zu/%d, train loss %.4f (first step) -> %.4f (mean of the last %d)\n"
                "  validation loss %s\n"
                "  throughput %.0f tokens/s, %s sent in all (%s/step; %s/step uncompressed)\n",
                static_cast<size_t>(job["steps_done"].get<int64_t>()), job["steps_total"].get<int>(),
                s["first_loss"].get<double>(), s["final_loss"].get<double>(), s["final_loss_steps"].get<int>(),
                s.contains("validation_loss") ? std::to_string(s["validation_loss"].get<double>()).c_str() : "n/a",
                s["tokens_per_s"].get<double>(), formatBytes(s["bytes_sent_total"].get<double>()).c_str(),
                formatBytes(s["bytes_sent_per_step"].get<double>()).c_str(),
                formatBytes(s.value("bytes_raw_per_step", 0.0)).c_str());
  return out + text;
}

}  // namespace skytrain::client
