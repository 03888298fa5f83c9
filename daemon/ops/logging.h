// The daemon's log lines: a level, and a format for people ("text") or for log shippers
// ("json", one object a line). Under systemd, stderr goes to the journal; each line then
// starts with its syslog priority ("<3>"), which journald strips and files as the entry's
// PRIORITY, so `journalctl -u skytraind -p warning` shows warnings and worse.
#pragma once

#include <spdlog/formatter.h>

#include <memory>
#include <string>

namespace skytrain::daemon {

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
