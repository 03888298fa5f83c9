#include "daemon/data_router.h"

#include <spdlog/spdlog.h>
#include <zmq_addon.hpp>

#include <vector>

#include "daemon/protocol/control.h"
#include "scheduler/error.h"

namespace skytrain::daemon {

using compression::FrameDirection;

DataRouter::DataRouter(zmq::context_t& context, const std::string& endpoint)
    : socket_(context, zmq::socket_type::router) {
  socket_.set(zmq::sockopt::linger, 0);
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
  auto& box = mailboxes_[{job, stage}];
  if (!box) box = std::make_shared<Mailbox>();
  return box;
}

void DataRouter::close(uint64_t job, uint16_t stage) {
  std::lock_guard<std::mutex> lock(mutex_);
  mailboxes_.erase({job, stage});
}

void DataRouter::run() {
  while (!stopping_) {
    if (!protocol::waitReadable(socket_, std::chrono::milliseconds(100))) continue;
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(socket_, std::back_inserter(parts), zmq::recv_flags::dontwait)) continue;
    if (parts.size() != 3) {  // routing id, header, payload
      ++dropped_;
      spdlog::warn("data: dropped a message of {} parts (expected a header and a payload)", parts.size() - 1);
      continue;
    }
    route(parts[1], parts[2]);
  }
}

void DataRouter::route(zmq::message_t& header, zmq::message_t& payload) {
  compression::TensorFrame frame;
  try {
    frame = compression::decodeFrame(header.data(), header.size(), payload.to_string());
  } catch (const WireError& e) {
    ++dropped_;
    spdlog::warn("data: dropped a malformed frame: {}", e.what());
    return;
  }
  std::shared_ptr<Mailbox> box;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = mailboxes_.find({frame.job, frame.stage});
    if (it != mailboxes_.end()) box = it->second;
  }
  if (!box) {
    ++dropped_;
    spdlog::warn("data: dropped a {} frame for job {:016x} stage {}, which this daemon does not host",
                 compression::toString(frame.direction), frame.job, frame.stage);
    return;
  }
  (compression::travelsUpstream(frame.direction) ? box->fromNext : box->fromPrevious).push(std::move(frame));
}

}  // namespace skytrain::daemon
