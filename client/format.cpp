#include "client/format.h"

#include <cstdio>
#include <ctime>

#include "daemon/protocol/printable.h"

namespace skytrain::client {

std::string formatAge(double seconds) {
  if (seconds < 0) seconds = 0;
  if (seconds < 120) return std::to_string(static_cast<int64_t>(seconds)) + "s";
  if (seconds < 7200) return std::to_string(static_cast<int64_t>(seconds / 60)) + "m";
  if (seconds < 172800) return std::to_string(static_cast<int64_t>(seconds / 3600)) + "h";
  return std::to_string(static_cast<int64_t>(seconds / 86400)) + "d";
}

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
  char text[320];
  const double loss = step["loss"].is_number() ? step["loss"].get<double>() : 0.0;
  std::snprintf(text, sizeof text, "step %4d/%d  loss %.4f  lr %.2e  %8.0f tok/s  sent %s/step (raw %s)  %.3f s%s",
                step["step"].get<int>(), stepsTotal, loss, step.value("lr", 0.0), step["tokens_per_s"].get<double>(),
                formatBytes(step["bytes_sent"].get<double>()).c_str(),
                formatBytes(step.value("bytes_raw", 0.0)).c_str(), step["step_s"].get<double>(),
                step.value("skipped", false) ? "  SKIPPED (non-finite gradient)" : "");
  std::string out = text;
  // A model with learned codes: each cut's share of the state its receiver rebuilds, and with
  // the sender's own loss each sender's, by the layer the cut is before.
  const auto byCut = [&](const char* key, const char* label, const char* format) {
    const auto it = step.find(key);
    if (it == step.end() || !it->is_object() || it->empty()) return;
    out += label;
    for (const auto& [layer, value] : it->items()) {
      if (!value.is_number()) continue;
      std::snprintf(text, sizeof text, format, layer.c_str(), value.get<double>());
      out += text;
    }
  };
  byCut("code_share", "  code share", " %.8s:%.3g");
  byCut("sender_loss", "  sender loss", " %.8s:%.4f");
  return out;
}

std::string formatPlan(const nlohmann::json& plan) {
  std::string out;
  char line[256];
  for (size_t i = 0; i < plan["links"].size(); ++i) {
    const auto& l = plan["links"][i];
    std::snprintf(line, sizeof line, "  link %zu->%zu: %s/s, one-way delay %.3f ms, %.1f us a message\n", i, i + 1,
                  formatBytes(l["bandwidth_bytes_per_s"].get<double>()).c_str(), 1e3 * l["delay_s"].get<double>(),
                  1e6 * l.value("overhead_s", 0.0));
    out += line;
  }
  for (size_t i = 0; i < plan["stages"].size(); ++i) {
    const auto& s = plan["stages"][i];
    std::snprintf(line, sizeof line, "  stage %zu: t_f(b) = %.2f + %.3f b ms, t_b(b) = %.2f + %.3f b ms", i,
                  1e3 * s["forward_s"]["a"].get<double>(), 1e3 * s["forward_s"]["k"].get<double>(),
                  1e3 * s["backward_s"]["a"].get<double>(), 1e3 * s["backward_s"]["k"].get<double>());
    out += line;
    if (s.contains("weight_s")) {  // the W pass's share of t_b under zb-h1
      std::snprintf(line, sizeof line, ", of which W %.2f + %.3f b ms", 1e3 * s["weight_s"]["a"].get<double>(),
                    1e3 * s["weight_s"]["k"].get<double>());
      out += line;
    }
    out += "\n";
    if (s.contains("parameters")) {
      std::snprintf(line, sizeof line, "           %lld parameters train, %lld frozen\n",
                    static_cast<long long>(s["parameters"]["trainable"].get<int64_t>()),
                    static_cast<long long>(s["parameters"]["frozen"].get<int64_t>()));
      out += line;
    }
    if (s.contains("profile")) {  // how long its compute took to profile, and how thoroughly
      std::snprintf(line, sizeof line, "           compute profiled in %.1f s (%s)\n", s["profile"]["seconds"].get<double>(),
                    s["profile"]["passes"] == "lean" ? "lean: two sizes, one pass each" : "full");
      out += line;
    }
    if (s.value("allreduce_s", 0.0) > 0) {
      std::snprintf(line, sizeof line, "           gradient all-reduce among %d replicas: %.2f ms\n",
                    plan.value("replicas", 1), 1e3 * s["allreduce_s"].get<double>());
      out += line;
    }
    for (const auto& init : s.value("init_from", nlohmann::json::array())) {
      out += "           init_from " + init["file"].get<std::string>() + ": " + std::to_string(init["loaded"].get<int>()) +
             " tensors loaded, " + std::to_string(init["from_seed"].get<int>()) + " trainable kept from the seed\n";
      if (init.value("format", std::string()) == "hf") {
        out += "             read " + formatBytes(init.value("bytes_read", 0.0)) + " of the checkpoint's " +
               formatBytes(init.value("bytes_total", 0.0)) + " (" + std::to_string(init.value("files", 0)) +
               " safetensors files): this stage's tensors only\n";
      }
    }
  }
  if (plan.value("tied_s", 0.0) > 0) {
    std::snprintf(line, sizeof line, "  tied embeddings: %.2f ms a step to sum the two copies' gradients over the links\n",
                  1e3 * plan["tied_s"].get<double>());
    out += line;
  }
  if (plan.value("replicas", 1) > 1) {
    std::snprintf(line, sizeof line, "  %d replicas of every stage: %d pipelines of %d samples a step each\n",
                  plan["replicas"].get<int>(), plan["replicas"].get<int>(), plan.value("batch_per_replica", 0));
    out += line;
  }
  if (plan.contains("update") && plan["update"] == "delayed") {
    out += "  one-step-delayed update: steps overlap; a step's time is the steady state of consecutive steps\n";
  }
  // The codecs the planner chose for "auto" directions: forward/backward, per link.
  auto codecs = [](const nlohmann::json& row) {
    std::string text;
    const auto forward = row.value("forward_codecs", nlohmann::json::array());
    const auto backward = row.value("backward_codecs", nlohmann::json::array());
    for (size_t l = 0; l < forward.size() && l < backward.size(); ++l) {
      const std::string f = forward[l].get<std::string>(), b = backward[l].get<std::string>();
      text += (l ? ", " : "") + (f.empty() ? std::string("=") : f) + "/" + (b.empty() ? std::string("=") : b);
    }
    return text;
  };
  const bool choosing = !codecs(plan).empty();
  out += std::string("     m  schedule     step (s)  bubble     sent/step     stash  all-reduce") +
         (choosing ? "  codecs fwd/bwd per link" : "") + "\n";
  for (const auto& row : plan["table"]) {
    const bool chosen = row["micro_batches"] == plan["micro_batches"] && row["schedule"] == plan["schedule"] &&
                        codecs(row) == codecs(plan);
    std::snprintf(line, sizeof line, "  %4d  %-11s %9.4f  %6.3f  %12s  %8s  %7.1f ms%s%s%s\n", row["micro_batches"].get<int>(),
                  row["schedule"].get<std::string>().c_str(), row["step_s"].get<double>(), row["bubble"].get<double>(),
                  formatBytes(row["bytes_per_step"].get<double>()).c_str(),
                  formatBytes(row["stash_bytes"].get<double>()).c_str(), 1e3 * row.value("allreduce_s", 0.0),
                  choosing ? ("  " + codecs(row)).c_str() : "", row["fits"].get<bool>() ? "" : "  (over budget)",
                  chosen ? "  <- chosen" : "");
    out += line;
  }
  std::snprintf(line, sizeof line, "  chosen: m=%d %s%s, predicted %.4f s/step, bubble %.3f (from step %lld: %s)\n",
                plan["micro_batches"].get<int>(), plan["schedule"].get<std::string>().c_str(),
                choosing ? (", codecs " + codecs(plan)).c_str() : "",
                plan["step_s"].get<double>(), plan["bubble"].get<double>(),
                static_cast<long long>(plan["from_step"].get<int64_t>()), plan["reason"].get<std::string>().c_str());
  return out + line;
}

std::string formatSummary(const nlohmann::json& job) {
  const auto& s = job["summary"];
  std::string out = "job " + job["id"].get<std::string>() + " " + job["state"].get<std::string>();
  if (!job["error"].get<std::string>().empty()) out += ": " + protocol::printable(job["error"].get<std::string>());
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
  out += text;
  if (s.contains("measured_step_s")) {
    std::snprintf(text, sizeof text,
                  "  step time predicted %.4f s, measured %.4f s (mean of %d steps); bubble predicted %.3f, measured %.3f\n",
                  s["predicted_step_s"].get<double>(), s["measured_step_s"].get<double>(), s["measured_steps"].get<int>(),
                  s["predicted_bubble"].get<double>(), s["measured_bubble"].get<double>());
    out += text;
  }
  return out;
}

std::string formatEvent(const nlohmann::json& event) {
  const std::time_t when = static_cast<std::time_t>(event.value("time", 0.0));
  std::tm utc{};
  gmtime_r(&when, &utc);
  char clock[32];
  std::strftime(clock, sizeof clock, "%H:%M:%S UTC", &utc);
  return "event at step " + event.value("step", nlohmann::json(0)).dump() + " (" + clock + "): " +
         protocol::printable(event.value("message", std::string()));
}

}  // namespace skytrain::client
