// delay_relay: a TCP relay that holds every byte for a fixed time in each direction without
// capping throughput — one-way delay for the emulated WAN, since this kernel has no netem.
// Usage: delay_relay LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS
// Single-threaded epoll. Each direction of each connection is a queue of (due time, bytes);
// reading stops while a direction holds more than kMaxQueued bytes (back-pressure).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kChunk = 256 * 1024;
constexpr size_t kMaxQueued = 64 << 20;

struct Chunk {
  Clock::time_point due;
  std::string bytes;
  size_t sent = 0;
};

// One direction: bytes read from `from`, written to `to` once due.
struct Pipe {
  int from = -1, to = -1;
  std::deque<Chunk> queue;
  size_t queued = 0;
  bool readClosed = false;
};

struct Connection {
  Pipe up, down;  // client -> target, target -> client
};

sockaddr_in resolve(const std::string& hostPort) {
  const auto colon = hostPort.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("expected HOST:PORT, got " + hostPort);
  addrinfo hints{}, *result = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(hostPort.substr(0, colon).c_str(), hostPort.substr(colon + 1).c_str(), &hints, &result) != 0) {
    throw std::runtime_error("cannot resolve " + hostPort);
  }
  sockaddr_in address = *reinterpret_cast<sockaddr_in*>(result->ai_addr);
  freeaddrinfo(result);
  return address;
}

void nonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

class Relay {
 public:
  Relay(const sockaddr_in& listen, sockaddr_in target, std::chrono::microseconds delay)
      : target_(target), delay_(delay), epoll_(epoll_create1(EPOLL_CLOEXEC)) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(listener_, reinterpret_cast<const sockaddr*>(&listen), sizeof listen) != 0 || ::listen(listener_, 64) != 0) {
      throw std::runtime_error(std::string("cannot listen: ") + std::strerror(errno));
    }
    nonBlocking(listener_);
    watch(listener_, EPOLLIN);
  }

  void run() {
    std::vector<epoll_event> events(64);
    while (true) {
      const int n = wait(events, timeout());
      if (n < 0 && errno != EINTR) throw std::runtime_error(std::string("epoll: ") + std::strerror(errno));
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == listener_) {
          accept();
        } else if (auto it = pipeOf_.find(fd); it != pipeOf_.end()) {
          pump(it->second);
        }
      }
      flushAll();
    }
  }

 private:
  void watch(int fd, uint32_t events) {
    epoll_event e{};
    e.events = events;
    e.data.fd = fd;
    if (epoll_ctl(epoll_, EPOLL_CTL_MOD, fd, &e) != 0) epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &e);
  }

  void accept() {
    while (true) {
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;
      const int server = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (connect(server, reinterpret_cast<const sockaddr*>(&target_), sizeof target_) != 0) {
        std::fprintf(stderr, "delay_relay: cannot reach the target: %s\n", std::strerror(errno));
        close(client);
        close(server);
        continue;
      }
      nonBlocking(client);
      nonBlocking(server);
      auto c = std::make_shared<Connection>();
      c->up.from = client;
      c->up.to = server;
      c->down.from = server;
      c->down.to = client;
      connections_.push_back(c);
      pipeOf_[client] = &c->up;
      pipeOf_[server] = &c->down;
      watch(client, EPOLLIN);
      watch(server, EPOLLIN);
    }
  }

  // Reads what is there into the pipe's queue, due `delay_` from now. A shaped link delivers
  // many small reads: each takes only its own bytes (one scratch buffer for all reads).
  void pump(Pipe* p) {
    while (!p->readClosed && p->queued < kMaxQueued) {
      const ssize_t got = read(p->from, scratch_.data(), scratch_.size());
      if (got > 0) {
        p->queued += static_cast<size_t>(got);
        p->queue.push_back({Clock::now() + delay_, std::string(scratch_.data(), static_cast<size_t>(got)), 0});
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        p->readClosed = true;  // forwarded as a shutdown once the queue drains
      } else {
        break;
      }
    }
    if (p->queued >= kMaxQueued) watch(p->from, 0);  // back-pressure until it drains
  }

  void flushAll() {
    const auto now = Clock::now();
    for (auto& c : connections_) {
      for (Pipe* p : {&c->up, &c->down}) {
        while (!p->queue.empty() && p->queue.front().due <= now) {
          Chunk& chunk = p->queue.front();
          const ssize_t sent = write(p->to, chunk.bytes.data() + chunk.sent, chunk.bytes.size() - chunk.sent);
          if (sent <= 0) break;  // the socket is full; try again on the next tick
          chunk.sent += static_cast<size_t>(sent);
          if (chunk.sent < chunk.bytes.size()) break;
          p->queued -= chunk.bytes.size();
          p->queue.pop_front();
          if (p->queued < kMaxQueued / 2 && !p->readClosed) watch(p->from, EPOLLIN);
        }
        if (p->readClosed && p->queue.empty() && p->to >= 0) shutdown(p->to, SHUT_WR);
      }
    }
    // Both directions closed and drained: the connection is over.
    for (auto it = connections_.begin(); it != connections_.end();) {
      Connection& c = **it;
      const bool over = c.up.readClosed && c.down.readClosed && c.up.queue.empty() && c.down.queue.empty();
      if (!over) {
        ++it;
        continue;
      }
      pipeOf_.erase(c.up.from);
      pipeOf_.erase(c.down.from);
      close(c.up.from);
      close(c.down.from);
      it = connections_.erase(it);
    }
  }

  // Until the next chunk falls due (at most 100 ms; 1 ms when one is due but its socket was
  // full).
  std::chrono::microseconds timeout() const {
    using std::chrono::microseconds;
    microseconds timeout(100'000);
    const auto now = Clock::now();
    for (const auto& c : connections_) {
      for (const Pipe* p : {&c->up, &c->down}) {
        if (p->queue.empty()) continue;
        const auto due = p->queue.front().due;
        timeout = std::min(timeout, due <= now ? microseconds(1000)
                                               : std::chrono::ceil<microseconds>(due - now));
      }
    }
    return timeout;
  }

  // epoll_wait to the microsecond (epoll_pwait2). Where the kernel lacks it, whole
  // milliseconds rounded up: rounding down would spin through the last millisecond of every
  // chunk's delay.
  int wait(std::vector<epoll_event>& events, std::chrono::microseconds timeout) {
    const int capacity = static_cast<int>(events.size());
    if (havePwait2_) {
      const timespec t{static_cast<time_t>(timeout.count() / 1'000'000), static_cast<long>(timeout.count() % 1'000'000 * 1000)};
      const int n = epoll_pwait2(epoll_, events.data(), capacity, &t, nullptr);
      if (n >= 0 || errno != ENOSYS) return n;
      havePwait2_ = false;
    }
    return epoll_wait(epoll_, events.data(), capacity, static_cast<int>((timeout.count() + 999) / 1000));
  }

  sockaddr_in target_;
  std::chrono::microseconds delay_;
  int epoll_;
  int listener_ = -1;
  std::vector<std::shared_ptr<Connection>> connections_;
  std::map<int, Pipe*> pipeOf_;
  std::vector<char> scratch_ = std::vector<char>(kChunk);
  bool havePwait2_ = true;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: delay_relay LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  try {
    const double delayMs = std::stod(argv[3]);
    Relay relay(resolve(argv[1]), resolve(argv[2]), std::chrono::microseconds(static_cast<int64_t>(delayMs * 1000)));
    std::fprintf(stderr, "delay_relay: %s -> %s, %.1f ms each way\n", argv[1], argv[2], delayMs);
    relay.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "delay_relay: %s\n", e.what());
    return 1;
  }
}
