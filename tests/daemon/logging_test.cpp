#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/details/log_msg.h>

#include <regex>
#include <thread>

#include "daemon/ops/logging.h"

using namespace skytrain::daemon;

namespace {
std::string formatted(spdlog::formatter& formatter, spdlog::level::level_enum level, const std::string& text) {
  spdlog::details::log_msg msg(spdlog::source_loc{}, "skytraind", level, text);
  spdlog::memory_buf_t out;
  formatter.format(msg, out);
  return std::string(out.data(), out.size());
}
}  // namespace

TEST_CASE("a JSON log line is one parseable object, whatever the message holds") {
  auto formatter = makeJsonFormatter(false);
  const std::string hostile = "job \"x\"\n\tbad utf-8: \xff\xfe end";
  const std::string line = formatted(*formatter, spdlog::level::warn, hostile);
  REQUIRE(line.back() == '\n');
  REQUIRE(line.find('\n') == line.size() - 1);  // one line, the newline in the message escaped
  const auto record = nlohmann::json::parse(line);
  CHECK(record["level"] == "warning");
  CHECK(record["message"].get<std::string>().rfind("job \"x\"\n\tbad utf-8: ", 0) == 0);
  CHECK(record["time"].get<std::string>().size() == 24);  // 2026-11-23T06:01:02.345Z
  CHECK(record["time"].get<std::string>().back() == 'Z');
  CHECK(record["thread"].is_number());
}

TEST_CASE("under the journal a line starts with its syslog priority") {
  CHECK(formatted(*makeJsonFormatter(true), spdlog::level::err, "x").rfind("<3>{", 0) == 0);
  CHECK(formatted(*makeTextFormatter(true), spdlog::level::warn, "slow link") == "<4>[warning] slow link\n");
  CHECK(formatted(*makeTextFormatter(true), spdlog::level::info, "x").rfind("<6>", 0) == 0);
  CHECK(formatted(*makeTextFormatter(true), spdlog::level::debug, "x").rfind("<7>", 0) == 0);
  CHECK(formatted(*makeTextFormatter(true), spdlog::level::critical, "x").rfind("<2>", 0) == 0);
  const std::string plain = formatted(*makeTextFormatter(false), spdlog::level::info, "hello");
  CHECK(plain.front() == '[');
  CHECK(plain.find("] [info] hello\n") != std::string::npos);
}

TEST_CASE("a text log line is one line: a job name cannot forge another or drive the terminal") {
  const std::string hostile = "job 1 (\"x\n[2026-11-25 10:00:00.000] [info] forged \x1b[2J\xe2\x80\xae\"): submitted";
  for (const bool journal : {false, true}) {
    const std::string line = formatted(*makeTextFormatter(journal), spdlog::level::info, hostile);
    CHECK(line.find('\n') == line.size() - 1);
    CHECK(line.find('\x1b') == std::string::npos);
    CHECK(line.find("\xe2\x80\xae") == std::string::npos);
    CHECK(line.find("x\\x0a[2026-11-25") != std::string::npos);
    CHECK(line.find("\\u{202e}") != std::string::npos);
  }
}


TEST_CASE("a JSON log line carries job, stage, step, attempt and peer as fields; a text line its time zone") {
  auto formatter = makeJsonFormatter(false);
  const auto record = nlohmann::json::parse(formatted(
      *formatter, spdlog::level::warn,
      "job 0123456789abcdef stage 1: attempt 2 lost 'cloud-b' (daemon) at step 40 (stage 3 too)"));
  CHECK(record["job"] == "0123456789abcdef");
  CHECK(record["stage"] == 1);  // the first of each
  CHECK(record["attempt"] == 2);
  CHECK(record["step"] == 40);
  CHECK(record["peer"] == "cloud-b");
  // Words only, whole ids only, and a name that merely looks like a field is left alone.
  const auto none = nlohmann::json::parse(formatted(*formatter, spdlog::level::info,
                                                    "backstage 3 job 123 substep 4 'x' (stranger) stage x"));
  CHECK_FALSE(none.contains("stage"));
  CHECK_FALSE(none.contains("job"));
  CHECK_FALSE(none.contains("step"));
  CHECK_FALSE(none.contains("peer"));
  const std::string text = formatted(*makeTextFormatter(false), spdlog::level::info, "hello");
  CHECK(std::regex_search(text, std::regex(R"(^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [+-]\d\d:\d\d\] \[info\] hello)")));
}

TEST_CASE("the fields a thread is working for are data in its JSON lines, over the message's words") {
  auto formatter = makeJsonFormatter(false);
  {
    LogScope scope({"00000000000000aa", 2, 1, 3, 17, "cloud-b"});
    const auto record = nlohmann::json::parse(
        formatted(*formatter, spdlog::level::info, "job 0123456789abcdef stage 0: something at step 5"));
    CHECK(record["job"] == "00000000000000aa");
    CHECK(record["stage"] == 2);
    CHECK(record["replica"] == 1);
    CHECK(record["attempt"] == 3);
    CHECK(record["step"] == 17);
    CHECK(record["peer"] == "cloud-b");
    {
      LogScope inner({"", -1, -1, -1, -1, "laptop-1"});  // a nested scope replaces, and restores at its end
      const auto nested = nlohmann::json::parse(formatted(*formatter, spdlog::level::info, "a request"));
      CHECK(nested["peer"] == "laptop-1");
      CHECK_FALSE(nested.contains("job"));
    }
    threadLogFields().step = 18;  // the worker moves on a step
    CHECK(nlohmann::json::parse(formatted(*formatter, spdlog::level::info, "x"))["step"] == 18);
  }
  const auto after = nlohmann::json::parse(formatted(*formatter, spdlog::level::info, "no scope"));
  CHECK_FALSE(after.contains("job"));
  CHECK_FALSE(after.contains("step"));
  // Other threads have their own.
  std::thread([&] {
    const auto other = nlohmann::json::parse(formatted(*formatter, spdlog::level::info, "elsewhere"));
    CHECK_FALSE(other.contains("peer"));
  }).join();
}
