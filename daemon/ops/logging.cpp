#include "daemon/ops/logging.h"

#include "daemon/protocol/printable.h"

#include <nlohmann/json.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string_view>

namespace skytrain::daemon {
namespace {

// syslog priorities (sd-daemon.h's SD_ERR etc.) by spdlog level.
int priorityOf(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
    case spdlog::level::debug: return 7;
    case spdlog::level::info: return 6;
    case spdlog::level::warn: return 4;
    case spdlog::level::err: return 3;
    case spdlog::level::critical: return 2;
    default: return 6;
  }
}

void appendPrefix(spdlog::memory_buf_t& dest, spdlog::level::level_enum level) {
  char prefix[8];
  const int n = std::snprintf(prefix, sizeof prefix, "<%d>", priorityOf(level));
  dest.append(prefix, prefix + n);
}

class PriorityFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    appendPrefix(dest, msg.level);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PriorityFlag>(); }
};

// The message of a text line, every byte that could forge a line or drive the terminal
// escaped (protocol/printable.h): messages carry job names and peers' errors.
class PrintableMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string text = protocol::printable(std::string_view(msg.payload.data(), msg.payload.size()), kMaxLoggedBytes);
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<PrintableMessageFlag>(); }

 private:
  static constexpr size_t kMaxLoggedBytes = 16384;
};

// The fields a log shipper filters by, for lines logged where no LogScope sets them: from
// the words every message uses for them: "job
// <16 hex digits>", "stage <n>", "step <n>", "attempt <n>", "replica <n>" (the first of
// each), and the peer named "'<name>' (daemon|client|admin)".
nlohmann::json messageFields(std::string_view text) {
  nlohmann::json fields = nlohmann::json::object();
  auto isDigit = [](char c) { return c >= '0' && c <= '9'; };
  auto isHex = [&](char c) { return isDigit(c) || (c >= 'a' && c <= 'f'); };
  for (size_t i = 0; i < text.size(); ++i) {
    if (i > 0 && std::isalnum(static_cast<unsigned char>(text[i - 1]))) continue;  // words only
    for (const char* word : {"job", "stage", "step", "attempt", "replica"}) {
      const size_t n = std::strlen(word);
      if (text.compare(i, n + 1, std::string(word) + " ") != 0 || fields.contains(word)) continue;
      size_t end = i + n + 1;
      if (std::string_view(word) == "job") {
        while (end < text.size() && isHex(text[end])) ++end;
        if (end - (i + n + 1) == 16 && (end == text.size() || !std::isalnum(static_cast<unsigned char>(text[end])))) {
          fields["job"] = std::string(text.substr(i + n + 1, 16));
        }
      } else {
        while (end < text.size() && end - (i + n + 1) < 12 && isDigit(text[end])) ++end;
        if (end > i + n + 1 && (end == text.size() || !std::isalnum(static_cast<unsigned char>(text[end])))) {
          fields[word] = std::stoll(std::string(text.substr(i + n + 1, end - (i + n + 1))));
        }
      }
    }
    if (text[i] == '\'' && !fields.contains("peer")) {
      const size_t close = text.find('\'', i + 1);
      if (close != std::string_view::npos && close - i <= 65) {
        for (const char* role : {" (daemon)", " (client)", " (admin)"}) {
          if (text.compare(close + 1, std::strlen(role), role) == 0) {
            fields["peer"] = std::string(text.substr(i + 1, close - i - 1));
            break;
          }
        }
      }
    }
  }
  return fields;
}

// The thread's fields, over what the message's words say.
void addThreadFields(nlohmann::json& record) {
  const LogFields& f = threadLogFields();
  if (!f.job.empty()) record["job"] = f.job;
  if (f.stage >= 0) record["stage"] = f.stage;
  if (f.replica >= 0) record["replica"] = f.replica;
  if (f.attempt >= 0) record["attempt"] = f.attempt;
  if (f.step >= 0) record["step"] = f.step;
  if (!f.peer.empty()) record["peer"] = f.peer;
}

class JsonFormatter : public spdlog::formatter {
 public:
  explicit JsonFormatter(bool priorityPrefix) : priorityPrefix_(priorityPrefix) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    if (priorityPrefix_) appendPrefix(dest, msg.level);
    const auto since = msg.time.time_since_epoch();
    const std::time_t seconds = std::chrono::duration_cast<std::chrono::seconds>(since).count();
    const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(since).count() % 1000;
    std::tm utc{};
    gmtime_r(&seconds, &utc);
    char stamp[40];
    const size_t n = std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
    std::snprintf(stamp + n, sizeof stamp - n, ".%03dZ", static_cast<int>(millis));
    const auto level = spdlog::level::to_string_view(msg.level);
    nlohmann::json record = {{"time", stamp},
                             {"level", std::string(level.data(), level.size())},
                             {"thread", msg.thread_id},
                             {"message", std::string(msg.payload.data(), msg.payload.size())}};
    record.update(messageFields(std::string_view(msg.payload.data(), msg.payload.size())));
    addThreadFields(record);
    const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(line.data(), line.data() + line.size());
    dest.push_back('\n');
  }

  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(priorityPrefix_); }

 private:
  bool priorityPrefix_;
};

// systemd sets $JOURNAL_STREAM to "<device>:<inode>" of the stream stderr is connected to.
bool stderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (!stream || !*stream) return false;
  struct stat st {};
  if (fstat(2, &st) != 0) return false;
  unsigned long long device = 0, inode = 0;
  if (std::sscanf(stream, "%llu:%llu", &device, &inode) != 2) return false;
  return device == static_cast<unsigned long long>(st.st_dev) && inode == static_cast<unsigned long long>(st.st_ino);
}

}  // namespace

LogFields& threadLogFields() {
  thread_local LogFields fields;
  return fields;
}

std::unique_ptr<spdlog::formatter> makeJsonFormatter(bool priorityPrefix) {
  return std::make_unique<JsonFormatter>(priorityPrefix);
}

std::unique_ptr<spdlog::formatter> makeTextFormatter(bool priorityPrefix) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<PriorityFlag>('*');
  formatter->add_flag<PrintableMessageFlag>('&');
  formatter->set_pattern(priorityPrefix ? "%*[%l] %&" : "[%Y-%m-%d %H:%M:%S.%e %z] [%l] %&");
  return formatter;
}

void setupLogging(const std::string& level, const std::string& format) {
  spdlog::set_level(spdlog::level::from_str(level));
  // The journal stamps every entry itself: no time in a text line there.
  const bool journal = stderrIsJournal();
  spdlog::set_formatter(format == "json" ? makeJsonFormatter(journal) : makeTextFormatter(journal));
}

}  // namespace skytrain::daemon
