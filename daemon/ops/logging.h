// The daemon's log lines: a level, and a format for people ("text") or for log shippers
// ("json", one object a line). Under systemd, stderr goes to the journal; each line then
// starts with its syslog priority ("<3>"), which journald strips and files as the entry's
// PRIORITY, so `journalctl -u skytraind -p warning` shows warnings and worse.
#pragma once

#include <spdlog/formatter.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace skytrain::daemon {

// What a thread is working for, which a JSON log line carries as fields: set by the stage
// worker (job, stage, replica, attempt, and the step it runs), the coordinator (job,
// attempt) and the control loop while it answers a request (peer, and the stage a stage
// request names). Unset: "" and -1. A field the thread leaves unset is taken from the
// message's words, as before ("job <16 hex digits>", "stage <n>", ...).
struct LogFields {
  std::string job;
  int stage = -1, replica = -1, attempt = -1;
  int64_t step = -1;  // 1-based, as every interface counts steps
  std::string peer;
};
LogFields& threadLogFields();

// Sets this thread's fields for a scope and restores the ones before at its end.
class LogScope {
 public:
  explicit LogScope(LogFields fields) : saved_(std::exchange(threadLogFields(), std::move(fields))) {}
  ~LogScope() { threadLogFields() = std::move(saved_); }
  LogScope(const LogScope&) = delete;
  LogScope& operator=(const LogScope&) = delete;

 private:
  LogFields saved_;
};

// Formats each record as {"time": ISO 8601 UTC, "level": ..., "thread": ..., "message": ...};
// a message's invalid UTF-8 is replaced, never thrown. With priorityPrefix, the line starts
// with "<N>" (sd-daemon's convention).
std::unique_ptr<spdlog::formatter> makeJsonFormatter(bool priorityPrefix);
// The text format: "[2026-11-23 06:01:02.345] [info] message", prefixed like the JSON one.
std::unique_ptr<spdlog::formatter> makeTextFormatter(bool priorityPrefix);

// Sets spdlog's level and format from the config's log_level and log_format. The priority
// prefix is on when stderr is the journal ($JOURNAL_STREAM names it).
void setupLogging(const std::string& level, const std::string& format);

}  // namespace skytrain::daemon
