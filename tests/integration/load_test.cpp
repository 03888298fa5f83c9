// Load and floods with real daemons over loopback: many jobs submitted at once all run (the
// heartbeat's bound starts once their coordinators have started every stage), and a flood
// of frames the daemon drops is counted in full but logged as a few lines and a summary.
#include <catch2/catch.hpp>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <zmq_addon.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "compression/wire/tensor_frame.h"
#include "daemon/daemon.h"
#include "daemon_fixture.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

// Counts the log lines that contain `needle`, from every thread of this process.
class CountingSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit CountingSink(std::string needle) : needle_(std::move(needle)) {}
  int count() const { return count_.load(); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (std::string_view(msg.payload.data(), msg.payload.size()).find(needle_) != std::string_view::npos) ++count_;
  }
  void flush_() override {}

 private:
  std::string needle_;
  std::atomic<int> count_{0};
};

}  // namespace

TEST_CASE("50 jobs submitted at once by one client all succeed", "[integration][load]") {
  TestDaemon a("loada"), b("loadb");
  zmq::context_t context;
  protocol::ControlClient client(context, a.control(), {});
  constexpr int kJobs = 50;
  std::vector<std::string> jobs;
  for (int i = 0; i < kJobs; ++i) {
    Json spec = twoStageSpec(a.control(), b.control(), 1);
    spec["name"] = "load-" + std::to_string(i);
    // A tight heartbeat bound (2 s), so preparing 100 stages at once on this machine
    // outlasts it: a stage must not count the time before its coordinator starts beating.
    // (1 s, once in several runs, saw a beat late by more while 100 stages trained on 2 cores.)
    spec["failure"] = {{"heartbeat_s", 0.25}, {"misses", 8}};
    jobs.push_back(client.request({{"type", "submit"}, {"spec", spec.dump()}}, seconds(10))["job"]);
  }
  int succeeded = 0;
  for (const auto& job : jobs) {
    Json status;
    for (int i = 0; i < 3000; ++i) {  // ten minutes at most, for all of them
      status = client.request({{"type", "status"}, {"job", job}}, seconds(10))["job"];
      if (status["state"] != "preparing" && status["state"] != "running") break;
      std::this_thread::sleep_for(milliseconds(200));
    }
    INFO(status.dump());
    CHECK(status["state"] == "succeeded");
    succeeded += status["state"] == "succeeded";
  }
  CHECK(succeeded == kJobs);
}

TEST_CASE("100,000 frames a daemon drops are each counted and logged as a few lines and a summary",
          "[integration][load][security]") {
  auto sink = std::make_shared<CountingSink>("data: dropped");
  spdlog::default_logger()->sinks().push_back(sink);
  TestDaemon d("flood");
  zmq::context_t context;
  const std::string data = ping(context, d, {})["data"];
  const auto frame = forgedFrame(0x1234, 0, 0, 1, compression::FrameDirection::Forward, std::vector<int64_t>{1});
  const std::string header = compression::encodeFrameHeader(frame);
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::linger, 5000);
  socket.connect(data);
  constexpr int kFrames = 100000;
  for (int i = 0; i < kFrames; ++i) {
    socket.send(zmq::buffer(header), zmq::send_flags::sndmore);
    socket.send(zmq::buffer(frame.tensor.payload));
  }
  const Json admin = [&] {
    Json reply;
    for (int i = 0; i < 600; ++i) {  // until every frame is counted
      reply = ping(context, d, {});
      if (reply["refused"]["frames"] == kFrames) break;
      std::this_thread::sleep_for(milliseconds(100));
    }
    return reply;
  }();
  CHECK(admin["refused"]["frames"] == kFrames);
  CHECK(sink->count() <= 25);  // a burst of 20, the note that the rest are counted, a summary or two
  CHECK(sink->count() >= 20);
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::find(sinks.begin(), sinks.end(), sink));
}
