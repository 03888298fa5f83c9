#include "daemon/net/data_router.h"

#include <spdlog/spdlog.h>
#include <zmq_addon.hpp>

#include <vector>

#include "daemon/net/zap_handler.h"
#include "daemon/protocol/control.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

using compression::FrameDirection;

DataRouter::DataRouter(zmq::context_t& context, const std::string& endpoint, const AccessList& access,
                       SecurityCounters& counters, int64_t maxFrameBytes)
    : socket_(context, zmq::socket_type::router), access_(access), counters_(counters) {
  if (!access_.insecure()) applyCurveServer(socket_, access_.self());
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::maxmsgsize, maxFrameBytes);
  socket_.set(zmq::sockopt::rcvhwm, 0);  // the stage worker's schedule bounds what is in flight
  try {
    socket_.bind(endpoint);
  } catch (const zmq::error_t& e) {
    throw Error("cannot bind data endpoint \"" + endpoint + "\": " + e.what());
  }
  boundEndpoint_ = socket_.get(zmq::sockopt::last_endpoint);
}

DataRouter::~DataRouter() { stop(); }

void DataRouter::start() { thread_ = std::thread([this] { run(); }); }

void DataRouter::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Mailbox> DataRouter::open(uint64_t job, uint16_t stage) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, added] = routes_.try_emplace({job, stage});
  if (!added) {
    // Two stage instances with one frame key (a hash of job, attempt and replica): the
    // second would share the first's frames and could close its route.
    throw Refusal("the frame key of stage " + std::to_string(stage) + " collides with a stage already hosted here");
  }
  it->second.mailbox = std::make_shared<Mailbox>();
  return it->second.mailbox;
}

void DataRouter::authorize(uint64_t job, uint16_t stage, std::vector<std::string> previousKeys, const std::string& nextKey) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = routes_.find({job, stage});
  if (it == routes_.end() || it->second.authorized) return;  // the neighbours are fixed once
  it->second.authorized = true;
  it->second.previousKeys = std::move(previousKeys);
  it->second.nextKey = nextKey;
}

void DataRouter::close(uint64_t job, uint16_t stage, const Mailbox* mailbox) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = routes_.find({job, stage});
  if (it != routes_.end() && it->second.mailbox.get() == mailbox) routes_.erase(it);
}

void DataRouter::drop(const std::string& why) {
  ++dropped_;
  dropLog_.warn(why);
}

void DataRouter::run() {
  while (!stopping_) {
    if (!protocol::waitReadable(socket_, std::chrono::milliseconds(100))) {
      dropLog_.flush();
      continue;
    }
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(socket_, std::back_inserter(parts), zmq::recv_flags::dontwait)) continue;
    if (parts.size() != 3) {  // routing id, header, payload
      drop("a message of " + std::to_string(parts.size() - 1) + " parts (expected a header and a payload)");
      continue;
    }
    route(parts[0], parts[1], parts[2]);
  }
}

void DataRouter::echoProbe(zmq::message_t& routingId, const compression::TensorFrame& probe) {
  compression::TensorFrame reply;
  reply.job = probe.job;
  reply.step = probe.step;
  reply.microBatch = probe.microBatch;
  reply.direction = FrameDirection::ProbeReply;
  reply.tensor = {"none", compression::WireDType::Float32, {1}, std::string(4, '\0')};
  const std::string header = compression::encodeFrameHeader(reply);
  // A prober that does not read its replies fills its queue; then its probes go unanswered.
  if (!socket_.send(routingId, zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
      !socket_.send(zmq::buffer(header), zmq::send_flags::sndmore) ||
      !socket_.send(zmq::buffer(reply.tensor.payload), zmq::send_flags::none)) {
    spdlog::debug("data: a link probe's reply would block; not answered");
  }
}

void DataRouter::route(zmq::message_t& routingId, zmq::message_t& header, zmq::message_t& payload) {
  const std::string sender = userIdOf(header);
  compression::TensorFrame frame;
  try {
    frame = compression::decodeFrame(header.data(), header.size(), payload.to_string());
  } catch (const WireError& e) {
    drop(std::string("a malformed frame: ") + e.what());
    return;
  }
  if (frame.job == compression::kLinkProbeJob) {
    if (frame.direction == FrameDirection::Probe) {
      echoProbe(routingId, frame);
    } else {
      drop("a " + compression::toString(frame.direction) + " frame for the link-probe job");
    }
    return;
  }
  const bool upstream = compression::travelsUpstream(frame.direction);
  std::shared_ptr<Mailbox> box;
  std::string expected;
  bool assigned = true;  // the frame names a neighbour this stage has (a fan-in's producer index)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = routes_.find({frame.job, frame.stage});
    if (it != routes_.end() && it->second.authorized) {
      box = it->second.mailbox;
      const auto& previous = it->second.previousKeys;
      const size_t producer = previous.size() > 1 ? frame.microBatch >> 16 : 0;
      if (upstream) {
        expected = it->second.nextKey;
      } else if (producer < previous.size()) {
        expected = previous[producer];
      } else {
        assigned = false;
      }
    }
  }
  char what[96];
  std::snprintf(what, sizeof what, "a %s frame for job %016llx stage %u", compression::toString(frame.direction).c_str(),
                static_cast<unsigned long long>(frame.job), static_cast<unsigned>(frame.stage));
  if (!box) {
    drop(std::string(what) + ", which this daemon does not host (or has not started)");
    return;
  }
  if (!assigned || (!access_.insecure() && sender != expected)) {
    ++counters_.framesRefused;
    const auto caller = access_.find(sender);
    drop(std::string(what) + " from " + (caller ? caller->describe() : "key " + sender) +
         ", which is not the neighbour assigned to that stage");
    return;
  }
  (upstream ? box->fromNext : box->fromPrevious).push(std::move(frame));
}

}  // namespace skytrain::daemon
