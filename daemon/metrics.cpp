#include "daemon/metrics.h"

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
#include <map>
#include <thread>

#include "daemon/job_table.h"
#include "daemon/security/access.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

using prometheus::ClientMetric;
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

// Families by name, in the order they were first used.
class Families {
 public:
  void add(const std::string& name, MetricType type, const std::string& help, std::vector<ClientMetric::Label> labels,
           double value) {
    auto [it, fresh] = index_.try_emplace(name, families_.size());
    if (fresh) families_.push_back({name, help, type, {}});
    ClientMetric metric;
    metric.label = std::move(labels);
    if (type == MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    families_[it->second].metric.push_back(std::move(metric));
  }
  std::vector<MetricFamily> take() { return std::move(families_); }

 private:
  std::vector<MetricFamily> families_;
  std::map<std::string, size_t> index_;
};

void addJob(Families& f, const JobMetrics& job) {
  const std::vector<ClientMetric::Label> labels = {{"job_id", job.id}, {"name", job.name}};
  const auto gauge = [&](const char* name, const char* help, const std::optional<double>& value) {
    if (value) f.add(name, MetricType::Gauge, help, labels, *value);
  };
  if (job.step) gauge("skytrain_job_step", "Last complete step of the job (0-based).", static_cast<double>(*job.step));
  gauge("skytrain_job_train_loss", "Training loss of the last complete step.", job.trainLoss);
  gauge("skytrain_job_validation_loss", "Loss on the held-out data at the last validation pass.", job.validationLoss);
  gauge("skytrain_job_tokens_per_second", "Tokens trained per second in the last complete step.", job.tokensPerSecond);
  gauge("skytrain_job_step_seconds", "Measured wall time of the last complete step.", job.stepSeconds);
  gauge("skytrain_job_predicted_step_seconds", "Step time the plan in force predicts.", job.predictedStepSeconds);
  gauge("skytrain_job_bubble_ratio", "Idle share of the stages in the last complete step.", job.bubble);
  gauge("skytrain_job_predicted_bubble_ratio", "Idle share the plan in force predicts.", job.predictedBubble);
  gauge("skytrain_job_checkpoint_age_seconds", "Seconds since the newest complete checkpoint.", job.checkpointAgeSeconds);
  f.add("skytrain_job_restarts_total", MetricType::Counter, "Times the job restarted from a checkpoint.", labels,
        job.restarts);
  for (size_t s = 0; s < job.stages.size(); ++s) {
    const StageTotals& t = job.stages[s];
    for (const auto& [direction, wire, raw] : {std::tuple{"forward", t.bytesForward, t.rawForward},
                                               std::tuple{"backward", t.bytesBackward, t.rawBackward}}) {
      auto at = labels;
      at.push_back({"stage", std::to_string(s)});
      at.push_back({"direction", direction});
      f.add("skytrain_stage_sent_bytes_total", MetricType::Counter,
            "Bytes a stage sent on the wire (frames after compression); forward: to the next stage.", at, wire);
      f.add("skytrain_stage_sent_raw_bytes_total", MetricType::Counter,
            "What the tensors a stage sent take uncompressed.", at, raw);
    }
    auto at = labels;
    at.push_back({"stage", std::to_string(s)});
    f.add("skytrain_stage_compute_seconds_total", MetricType::Counter,
          "Forward, backward, optimizer and codec time of a stage.", at, t.computeSeconds);
  }
  for (size_t l = 0; l < job.links.size(); ++l) {
    auto at = labels;
    at.push_back({"link", std::to_string(l) + "-" + std::to_string(l + 1)});
    f.add("skytrain_link_bandwidth_bytes_per_second", MetricType::Gauge,
          "Bandwidth of the link between two stages as the planner measured it.", at, job.links[l].first);
    f.add("skytrain_link_rtt_seconds", MetricType::Gauge, "Round trip of the link as the planner measured it.", at,
          job.links[l].second);
  }
}

class Collector : public prometheus::Collectable {
 public:
  Collector(const JobTable& jobs, const SecurityCounters& counters) : jobs_(jobs), counters_(counters) {}

  std::vector<MetricFamily> Collect() const override {
    Families f;
    try {
      const auto jobs = jobs_.metrics();
      std::map<JobState, int> byState;
      for (auto state : kJobStates) byState[state] = 0;
      for (const auto& job : jobs) ++byState[job.state];
      for (const auto& [state, count] : byState) {
        f.add("skytrain_jobs", MetricType::Gauge, "Jobs this daemon coordinates, by state.", {{"state", toString(state)}},
              count);
      }
      for (const auto& job : jobs) addJob(f, job);
    } catch (const std::exception&) {
      // A scrape never fails the daemon: the per-daemon figures below still go out.
    }
    const std::pair<const char*, uint64_t> refusals[] = {
        {"key_not_authorized", counters_.handshakesRefused.load()},
        {"request_not_allowed", counters_.requestsRefused.load()},
        {"report_from_wrong_daemon", counters_.reportsRefused.load()},
        {"frame_refused", counters_.framesRefused.load()}};
    for (const auto& [reason, count] : refusals) {
      f.add("skytrain_refused_total", MetricType::Counter,
            "Handshakes, requests, stage reports and data frames refused, by reason.", {{"reason", reason}},
            static_cast<double>(count));
    }
    f.add("process_resident_memory_bytes", MetricType::Gauge, "Resident memory of skytraind.", {}, residentBytes());
    return f.take();
  }

 private:
  const JobTable& jobs_;
  const SecurityCounters& counters_;
};

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
  std::shared_ptr<Collector> collector;
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
                           prometheus::TextSerializer().Serialize(collector->Collect())));
    }
  }
};

MetricsServer::MetricsServer(const std::string& address, const JobTable& jobs, const SecurityCounters& counters)
    : impl_(std::make_unique<Impl>()) {
  impl_->collector = std::make_shared<Collector>(jobs, counters);
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
