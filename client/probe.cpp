#include "client/probe.h"

#include <zmq_addon.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "client/format.h"
#include "compression/wire/tensor_frame.h"
#include "scheduler/error.h"

namespace skytrain::client {
namespace {

using compression::FrameDirection;
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

class Prober {
 public:
  Prober(zmq::context_t& context, const std::string& endpoint, const protocol::ClientSecurity& security,
         std::chrono::milliseconds timeout)
      : socket_(context, zmq::socket_type::dealer), endpoint_(endpoint), timeout_(timeout) {
    protocol::applyClientSecurity(socket_, security);
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }

  // Sends a probe of `floats` float32 zeros tagged `index`; returns its frame's bytes.
  size_t send(uint32_t index, size_t floats) {
    compression::TensorFrame frame;
    frame.job = compression::kLinkProbeJob;
    frame.step = round_;
    frame.microBatch = index;
    frame.direction = FrameDirection::Probe;
    frame.tensor = {"none", compression::WireDType::Float32, {static_cast<int64_t>(floats)}, std::string(4 * floats, '\0')};
    const std::string header = compression::encodeFrameHeader(frame);
    socket_.send(zmq::buffer(header), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(frame.tensor.payload), zmq::send_flags::none);
    return header.size() + frame.tensor.payload.size();
  }

  // Waits for the reply tagged `index` of this round; replies of earlier rounds are skipped.
  void await(uint32_t index) {
    const auto deadline = Clock::now() + timeout_;
    while (Clock::now() < deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (!protocol::waitReadable(socket_, std::max(left, std::chrono::milliseconds(1)))) continue;
      std::vector<zmq::message_t> parts;
      if (!zmq::recv_multipart(socket_, std::back_inserter(parts), zmq::recv_flags::dontwait) || parts.size() != 2) continue;
      try {
        const auto reply = compression::decodeFrame(parts[0].data(), parts[0].size(), parts[1].to_string());
        if (reply.direction == FrameDirection::ProbeReply && reply.step == round_ && reply.microBatch == index) return;
      } catch (const WireError&) {
        // not a probe reply: ignored
      }
    }
    throw PeerError("no probe reply from " + endpoint_ + " within " + std::to_string(timeout_.count()) +
                    " ms (is it a skytrain data endpoint, and is your key authorized there?)");
  }

  // The fastest of `count` round trips of a `floats`-float probe.
  double fastestRoundTrip(size_t floats, int count) {
    double best = 1e30;
    for (int i = 0; i < count; ++i) {
      ++round_;
      const auto start = Clock::now();
      send(0, floats);
      await(0);
      best = std::min(best, secondsSince(start));
    }
    return best;
  }

  // Seconds for `count` tiny probes sent back to back until the last reply.
  double burst(int count) {
    ++round_;
    const auto start = Clock::now();
    for (int i = 0; i < count; ++i) send(static_cast<uint32_t>(i), 1);
    for (int i = 0; i < count; ++i) await(static_cast<uint32_t>(i));
    return secondsSince(start);
  }

 private:
  zmq::socket_t socket_;
  std::string endpoint_;
  std::chrono::milliseconds timeout_;
  uint64_t round_ = 0;
};

}  // namespace

nlohmann::json probeDataEndpoint(zmq::context_t& context, const std::string& dataEndpoint,
                                 const protocol::ClientSecurity& security, const ProbeOptions& options) {
  Prober prober(context, dataEndpoint, security, options.timeout);
  const size_t midFloats = std::max<size_t>(1, options.bigBytes / 4), bigFloats = 3 * midFloats;
  prober.fastestRoundTrip(1, 2);  // connects and completes the CURVE handshake first
  const double small = prober.fastestRoundTrip(1, options.roundTrips);
  const int bigTrips = std::max(2, options.roundTrips / 2);
  const double mid = prober.fastestRoundTrip(midFloats, bigTrips);
  const double big = prober.fastestRoundTrip(bigFloats, bigTrips);
  const double burst = prober.burst(options.burst);
  auto frameBytes = [](size_t floats) { return static_cast<double>(compression::frameHeaderBytes(1, 4) + 4 * floats); };
  // As the planner: the bandwidth is the slope between two large frames (a link's burst
  // allowance counts in both and cancels); the tiny frame's round trip is twice the one-way
  // delay. Back to back, each further tiny message costs what a message costs beyond the
  // round trip.
  const double transfer = std::max(1e-7, big - mid);
  return {{"data_endpoint", dataEndpoint},
          {"bandwidth_bytes_per_s", (frameBytes(bigFloats) - frameBytes(midFloats)) / transfer},
          {"delay_s", small / 2},
          {"overhead_s", std::max(0.0, (burst - small) / std::max(1, options.burst - 1))},
          {"rtt_small_s", small},
          {"rtt_mid_s", mid},
          {"rtt_big_s", big},
          {"small_bytes", frameBytes(1)},
          {"mid_bytes", frameBytes(midFloats)},
          {"probe_bytes", frameBytes(bigFloats)},
          {"round_trips", options.roundTrips},
          {"burst", options.burst}};
}

std::string formatProbe(const nlohmann::json& r) {
  char text[1024];
  std::snprintf(text, sizeof text,
                "link to %s\n"
                "  round trip          %10.3f ms   (%.0f-byte frame, fastest of %d)\n"
                "  one-way delay       %10.3f ms   (half the round trip)\n"
                "  bandwidth           %10s/s  (%s against %s frames: %.3f ms more)\n"
                "  per-message overhead %9.3f ms   (%d frames back to back)\n",
                r["data_endpoint"].get<std::string>().c_str(), 1e3 * r["rtt_small_s"].get<double>(),
                r["small_bytes"].get<double>(), r["round_trips"].get<int>(), 1e3 * r["delay_s"].get<double>(),
                formatBytes(r["bandwidth_bytes_per_s"].get<double>()).c_str(),
                formatBytes(r["probe_bytes"].get<double>()).c_str(), formatBytes(r["mid_bytes"].get<double>()).c_str(),
                1e3 * (r["rtt_big_s"].get<double>() - r["rtt_mid_s"].get<double>()), 1e3 * r["overhead_s"].get<double>(),
                r["burst"].get<int>());
  return text;
}

}  // namespace skytrain::client
