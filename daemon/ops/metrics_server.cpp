#include "daemon/ops/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include "daemon/ops/metric_families.h"
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

// This process's own families, after the collectables' in every scrape.
std::vector<MetricFamily> processFamilies() {
  Families f;
  f.add("process_resident_memory_bytes", MetricType::Gauge, "Resident memory of skytraind.", {}, residentBytes());
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

// The first line of an HTTP request, read with a deadline and a size bound; empty if the
// peer sends nothing usable.
std::string requestLine(int fd) {
  std::string head;
  char buffer[1024];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < kMaxRequestBytes) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    head.append(buffer, static_cast<size_t>(n));
  }
  return head.substr(0, head.find("\r\n"));
}

void sendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string response(const std::string& status, const std::string& type, const std::string& body) {
  return "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

// One thread answers one scrape at a time: Prometheus scrapes every few seconds, and a
// request is bounded in size and time.
struct MetricsServer::Impl {
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables;
  int listener = -1;
  int wake[2] = {-1, -1};  // a pipe: written to stop the thread
  int port = 0;
  std::thread thread;

  void serve() {
    for (;;) {
      pollfd fds[2] = {{listener, POLLIN, 0}, {wake[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
      if (fds[1].revents) return;
      if (!(fds[0].revents & POLLIN)) continue;
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      try {
        answer(fd);
      } catch (const std::exception& e) {
        spdlog::warn("metrics: {}", e.what());
      }
      ::close(fd);
    }
  }

  void answer(int fd) const {
    const std::string line = requestLine(fd);
    if (line.rfind("GET ", 0) != 0) {
      sendAll(fd, response("405 Method Not Allowed", "text/plain", "only GET /metrics\n"));
    } else if (line.rfind("GET /metrics ", 0) != 0 && line.rfind("GET /metrics?", 0) != 0) {
      sendAll(fd, response("404 Not Found", "text/plain", "skytraind serves /metrics only\n"));
    } else {
      sendAll(fd, response("200 OK", "text/plain; version=0.0.4; charset=utf-8",
                           prometheus::TextSerializer().Serialize(collectAll(collectables))));
    }
  }
};

MetricsServer::MetricsServer(const std::string& address,
                             std::vector<std::shared_ptr<prometheus::Collectable>> collectables)
    : impl_(std::make_unique<Impl>()) {
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
