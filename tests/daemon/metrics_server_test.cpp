// /metrics over real TCP loopback: a scrape is answered at once while idle, slow and
// never-reading connections are held open, and more connections than the server keeps
// cannot lock it out.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "daemon/ops/metrics/metrics_server.h"

using skytrain::daemon::MetricsServer;
using Clock = std::chrono::steady_clock;

namespace {

int connectTo(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

// A whole scrape: its response, or "" when none came within `limit`.
std::string scrape(int port, std::chrono::milliseconds limit, const std::string& path = "/metrics") {
  const int fd = connectTo(port);
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string reply;
  const auto deadline = Clock::now() + limit;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) {
      reply.clear();
      break;
    }
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;  // the server closes after its answer
    reply.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return reply;
}

}  // namespace

TEST_CASE("a scrape is served while idle, slow and silent connections are held", "[metrics]") {
  MetricsServer server("127.0.0.1:0", {});
  std::vector<int> held;
  for (int i = 0; i < 30; ++i) held.push_back(connectTo(server.port()));  // idle: never send
  for (int i = 0; i < 20; ++i) {                                          // slow: half a request head
    const int fd = connectTo(server.port());
    ::send(fd, "GET /metr", 9, MSG_NOSIGNAL);
    held.push_back(fd);
  }
  for (int i = 0; i < 3; ++i) {  // several scrapes, each answered at once
    const auto start = Clock::now();
    const std::string reply = scrape(server.port(), std::chrono::milliseconds(1000));
    CHECK(reply.rfind("HTTP/1.1 200 OK", 0) == 0);
    CHECK(reply.find("process_resident_memory_bytes") != std::string::npos);
    CHECK(Clock::now() - start < std::chrono::milliseconds(2000));  // not held for the 5 s an idle connection may take
  }
  // Past the server's limit on open connections: the oldest go, the scrape is still served.
  for (int i = 0; i < 80; ++i) held.push_back(connectTo(server.port()));
  CHECK(scrape(server.port(), std::chrono::milliseconds(1000)).rfind("HTTP/1.1 200 OK", 0) == 0);
  for (const int fd : held) ::close(fd);
}

TEST_CASE("a request that is not GET /metrics is answered with its status, and an endless head is cut off",
          "[metrics]") {
  MetricsServer server("127.0.0.1:0", {});
  const int fd = connectTo(server.port());
  const std::string junk(20000, 'x');
  ::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
  char buffer[256] = {};
  pollfd p{fd, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 2000) == 1);
  REQUIRE(::recv(fd, buffer, sizeof buffer - 1, 0) > 0);
  CHECK(std::string(buffer).rfind("HTTP/1.1 405", 0) == 0);
  ::close(fd);
}

TEST_CASE("/healthz answers ok; a scrape has the process's families and the build's", "[metrics]") {
  MetricsServer server("127.0.0.1:0", {});
  const std::string health = scrape(server.port(), std::chrono::milliseconds(1000), "/healthz");
  CHECK(health.rfind("HTTP/1.1 200 OK", 0) == 0);
  CHECK(health.substr(health.size() - 3) == "ok\n");
  CHECK(scrape(server.port(), std::chrono::milliseconds(1000), "/other").rfind("HTTP/1.1 404", 0) == 0);
  const std::string metrics = scrape(server.port(), std::chrono::milliseconds(1000));
  for (const char* family : {"process_cpu_seconds_total ", "process_start_time_seconds ", "skytrain_build_info{"}) {
    INFO(family);
    CHECK(metrics.find(family) != std::string::npos);
  }
  CHECK(metrics.find(std::string("version=\"") + SKYTRAIN_VERSION + "\"") != std::string::npos);
}
