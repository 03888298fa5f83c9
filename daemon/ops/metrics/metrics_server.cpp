#include "daemon/ops/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "daemon/ops/checkpoint_dirs.h"
#include "daemon/ops/metrics/metric_families.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

constexpr size_t kMaxRequestBytes = 8192;  // a scrape's request head is a few hundred bytes

// Resident set size of this process, from /proc/self/statm (0 if unreadable).
double residentBytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

// CPU seconds (user + system) this process has used.
double cpuSeconds() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// When this process started, in seconds since the epoch (read once: it does not change).
double startTimeSeconds() {
  static const double start =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return start;
}

// This process's own families, after the collectables' in every scrape (the names and
// meanings of Prometheus's client libraries, so their dashboards apply).
std::vector<MetricFamily> processFamilies() {
  Families f;
  f.add("process_resident_memory_bytes", MetricType::Gauge, "Resident memory of skytraind.", {}, residentBytes());
  f.add("process_cpu_seconds_total", MetricType::Counter, "User and system CPU time skytraind has used.", {}, cpuSeconds());
  f.add("process_start_time_seconds", MetricType::Gauge, "When skytraind started, in seconds since the Unix epoch.", {},
        startTimeSeconds());
  f.add("skytrain_build_info", MetricType::Gauge, "Always 1; its labels name the build of skytraind that serves it.",
        {{"version", SKYTRAIN_VERSION}, {"checkpoint_format", std::to_string(kCheckpointFormat)}}, 1);
  return f.take();
}

// Every collectable's families in order, then the process's.
std::vector<MetricFamily> collectAll(const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  std::vector<MetricFamily> families;
  for (const auto& collectable : collectables) {
    for (auto& family : collectable->Collect()) families.push_back(std::move(family));
  }
  for (auto& family : processFamilies()) families.push_back(std::move(family));
  return families;
}

// Splits "host:port"; throws skytrain::Error naming the address if it is not one.
sockaddr_in parseAddress(const std::string& address) {
  const auto colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  const std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
  const std::string port = colon == std::string::npos ? "" : address.substr(colon + 1);
  char* end = nullptr;
  const long number = port.empty() ? -1 : std::strtol(port.c_str(), &end, 10);
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1 || number < 0 || number > 65535 || *end != '\0') {
    throw Error("metrics_address \"" + address + "\" is not \"<IPv4 address>:<port>\"");
  }
  a.sin_port = htons(static_cast<uint16_t>(number));
  return a;
}

std::string response(const std::string& status, const std::string& type, const std::string& body) {
  return "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

// A scrape in progress: its request head as read so far, then its response as sent so far.
struct Connection {
  int fd = -1;
  std::chrono::steady_clock::time_point deadline;
  std::string head;     // the request, until its blank line
  std::string out;      // the response, once the head is complete
  size_t sent = 0;
  bool answered = false;
};

// One thread serves every connection at once over poll(): an idle or slow connection holds
// only its own slot until its deadline, never the next scrape. At most kMaxConnections are
// open; a new one past that replaces the oldest.
struct MetricsServer::Impl {
  static constexpr size_t kMaxConnections = 64;
  static constexpr std::chrono::seconds kDeadline{5};  // to send the request and read the answer

  std::vector<std::shared_ptr<prometheus::Collectable>> collectables;
  int listener = -1;
  int wake[2] = {-1, -1};  // a pipe: written to stop the thread
  int port = 0;
  std::thread thread;
  std::vector<Connection> open;

  void serve() {
    for (;;) {
      std::vector<pollfd> fds{{listener, POLLIN, 0}, {wake[0], POLLIN, 0}};
      auto next = std::chrono::steady_clock::now() + std::chrono::hours(1);
      for (const auto& c : open) {
        fds.push_back({c.fd, static_cast<short>(c.answered ? POLLOUT : POLLIN), 0});
        next = std::min(next, c.deadline);
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - std::chrono::steady_clock::now());
      if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, wait.count()) + 1)) < 0 && errno != EINTR) return;
      if (fds[1].revents) break;
      for (size_t i = 0; i < open.size(); ++i) {
        if (fds[2 + i].revents) step(open[i]);
      }
      const auto now = std::chrono::steady_clock::now();
      for (auto it = open.begin(); it != open.end();) {
        if (it->fd >= 0 && now < it->deadline) {
          ++it;
          continue;
        }
        if (it->fd >= 0) ::close(it->fd);
        it = open.erase(it);
      }
      if (fds[0].revents & POLLIN) accept();
    }
    for (const auto& c : open) ::close(c.fd);
  }

  void accept() {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    if (open.size() >= kMaxConnections) {
      ::close(open.front().fd);
      open.erase(open.begin());
    }
    Connection c;
    c.fd = fd;
    c.deadline = std::chrono::steady_clock::now() + kDeadline;
    open.push_back(std::move(c));
  }

  // Reads what the peer sent, or sends what it can take; closes (fd = -1) when done or broken.
  void step(Connection& c) const {
    if (!c.answered) {
      char buffer[1024];
      const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) return finish(c);
      if (n > 0) c.head.append(buffer, static_cast<size_t>(n));
      if (c.head.find("\r\n\r\n") == std::string::npos && c.head.size() < kMaxRequestBytes) return;
      c.out = answer(c.head.substr(0, c.head.find("\r\n")));
      c.head.clear();
      c.answered = true;
    }
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) return finish(c);
    c.sent += static_cast<size_t>(n);
    if (c.sent == c.out.size()) finish(c);
  }

  static void finish(Connection& c) {
    ::close(c.fd);
    c.fd = -1;
  }

  std::string answer(const std::string& line) const {
    if (line.rfind("GET ", 0) != 0) return response("405 Method Not Allowed", "text/plain", "only GET /metrics and /healthz\n");
    // Liveness, for a load balancer or a Kubernetes probe: answered by the daemon's serving
    // thread, so a hung or stopped daemon does not answer it.
    if (line.rfind("GET /healthz ", 0) == 0) return response("200 OK", "text/plain", "ok\n");
    if (line.rfind("GET /metrics ", 0) != 0 && line.rfind("GET /metrics?", 0) != 0) {
      return response("404 Not Found", "text/plain", "skytraind serves /metrics and /healthz only\n");
    }
    try {
      return response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                      prometheus::TextSerializer().Serialize(collectAll(collectables)));
    } catch (const std::exception& e) {
      spdlog::warn("metrics: {}", e.what());
      return response("500 Internal Server Error", "text/plain", "cannot collect the metrics\n");
    }
  }
};

MetricsServer::MetricsServer(const std::string& address,
                             std::vector<std::shared_ptr<prometheus::Collectable>> collectables)
    : impl_(std::make_unique<Impl>()) {
  startTimeSeconds();  // fixed now, as the daemon starts
  impl_->collectables = std::move(collectables);
  sockaddr_in a = parseAddress(address);
  impl_->listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int yes = 1;
  socklen_t length = sizeof a;
  if (impl_->listener < 0 || ::setsockopt(impl_->listener, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes) != 0 ||
      ::bind(impl_->listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(impl_->listener, 16) != 0 ||
      ::getsockname(impl_->listener, reinterpret_cast<sockaddr*>(&a), &length) != 0 || ::pipe2(impl_->wake, O_CLOEXEC) != 0) {
    const std::string why = std::strerror(errno);
    if (impl_->listener >= 0) ::close(impl_->listener);
    throw Error("cannot serve /metrics on \"" + address + "\": " + why);
  }
  impl_->port = ntohs(a.sin_port);
  impl_->thread = std::thread([impl = impl_.get()] { impl->serve(); });
}

MetricsServer::~MetricsServer() {
  if (::write(impl_->wake[1], "x", 1) < 0) spdlog::warn("metrics: cannot wake the server thread");
  impl_->thread.join();
  ::close(impl_->listener);
  ::close(impl_->wake[0]);
  ::close(impl_->wake[1]);
}

int MetricsServer::port() const { return impl_->port; }

}  // namespace skytrain::daemon
