#include <catch2/catch.hpp>

#include <sstream>

#include "client/job_printer.h"

using namespace skytrain::client;
using nlohmann::json;

namespace {
json row(int step, double time) {
  return {{"step", step}, {"loss", 2.5}, {"lr", 1e-4}, {"tokens_per_s", 12000.0}, {"bytes_sent", 1e6},
          {"bytes_raw", 2e6}, {"step_s", 0.5}, {"time", time}};
}
}  // namespace

TEST_CASE("on a terminal, steps redraw one bar; events print above it") {
  std::ostringstream out;
  JobPrinter printer(out, OutputMode::Bar, 100);
  printer.step(row(1, 100.0), 100);  // rows carry step numbers (1-based)
  printer.step(row(2, 101.0), 100);  // 1 s a step since the last: 98 steps left
  printer.event({{"time", 0}, {"step", 2}, {"message", "stage 1 lost"}});
  const std::string text = out.str();
  CHECK(text.find("\r\033[K[") != std::string::npos);
  CHECK(text.find("2/100") != std::string::npos);
  CHECK(text.find("ETA") != std::string::npos);
  CHECK(text.find("stage 1 lost\n") != std::string::npos);
  CHECK(text.find("step    1/100") == std::string::npos);  // no per-step lines
}

TEST_CASE("the bar shows progress, ETA, loss and rate within the width") {
  const std::string bar = JobPrinter::bar(row(50, 0), 100, 2.0, 100);
  CHECK(bar.find("50/100  50%") != std::string::npos);
  CHECK(bar.find("ETA 1m40s") != std::string::npos);
  CHECK(bar.find("loss 2.5000") != std::string::npos);
  CHECK(bar.find("12000 tok/s") != std::string::npos);
  CHECK(bar.size() <= 100);
  CHECK(bar.find(std::string(20, '#')) != std::string::npos);
}

TEST_CASE("not on a terminal: plain lines; --json: one object a line with its type") {
  std::ostringstream lines, json;
  JobPrinter(lines, OutputMode::Lines).step(row(1, 1), 10);
  CHECK(lines.str().rfind("step    1/10  loss 2.5000", 0) == 0);
  CHECK(lines.str().find('\r') == std::string::npos);
  JobPrinter printer(json, OutputMode::Json);
  printer.step(row(1, 1), 10);
  printer.eval({{"step", 1}, {"loss", 2.0}});
  std::istringstream in(json.str());
  std::string first, second;
  std::getline(in, first);
  std::getline(in, second);
  CHECK(nlohmann::json::parse(first)["type"] == "step");
  CHECK(nlohmann::json::parse(first)["loss"] == 2.5);
  CHECK(nlohmann::json::parse(second)["type"] == "eval");
}

TEST_CASE("a model with learned codes: each cut's code share and sender's loss end the line") {
  std::ostringstream lines;
  json r = row(1, 1);
  r["code_share"] = {{"2", 0.3125}, {"3", "x"}};  // a value that is not a number is left out
  r["sender_loss"] = {{"2", 1.23456}};
  JobPrinter(lines, OutputMode::Lines).step(r, 10);
  CHECK_THAT(lines.str(), Catch::Contains("  code share 2:0.312  sender loss 2:1.2346"));
  std::ostringstream plain;
  JobPrinter(plain, OutputMode::Lines).step(row(1, 1), 10);
  CHECK_THAT(plain.str(), !Catch::Contains("code share") && !Catch::Contains("sender loss"));
}
