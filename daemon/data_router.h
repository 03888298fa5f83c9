// DataRouter: the data thread. Owns the daemon's data ROUTER socket, checks every
// TensorFrame and hands it to the mailbox of the (job, stage) it is addressed to.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/mailbox.h"

namespace skytrain::daemon {

class DataRouter {
 public:
  // Binds the data endpoint on the calling thread; the socket is used only by the data
  // thread from start() on. Throws skytrain::Error if the endpoint cannot be bound.
  DataRouter(zmq::context_t& context, const std::string& endpoint);
  ~DataRouter();

  void start();
  void stop();
  std::string boundEndpoint() const { return boundEndpoint_; }

  // Called by the control thread when a stage is prepared / finished.
  std::shared_ptr<Mailbox> open(uint64_t job, uint16_t stage);
  void close(uint64_t job, uint16_t stage);

  uint64_t framesDropped() const { return dropped_.load(); }

 private:
  void run();
  void route(zmq::message_t& header, zmq::message_t& payload);

  zmq::socket_t socket_;  // owned by the data thread once started
  std::string boundEndpoint_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> dropped_{0};
  std::mutex mutex_;  // guards mailboxes_
  std::map<std::pair<uint64_t, uint16_t>, std::shared_ptr<Mailbox>> mailboxes_;
};

}  // namespace skytrain::daemon
