// DataRouter: the data thread. Owns the daemon's data ROUTER socket (a CURVE server),
// checks every TensorFrame and hands it to the mailbox of the (job, stage) it is addressed
// to — only when it comes from the neighbour daemon the coordinator assigned to that
// direction (by the ZAP User-Id of its connection).
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/net/access.h"
#include "daemon/net/mailbox.h"
#include "daemon/ops/log_limiter.h"

namespace skytrain::daemon {

class DataRouter {
 public:
  // Binds the data endpoint on the calling thread; the socket is used only by the data
  // thread from start() on. Throws skytrain::Error if the endpoint cannot be bound.
  DataRouter(zmq::context_t& context, const std::string& endpoint, const AccessList& access,
             SecurityCounters& counters, int64_t maxFrameBytes);
  ~DataRouter();

  void start();
  void stop();
  std::string boundEndpoint() const { return boundEndpoint_; }

  // Called by the control thread when a stage is prepared / started / finished. Frames for
  // a stage are dropped until authorize() names the keys of its neighbours' daemons. open()
  // throws Refusal when (job, stage) is already open: one route, one stage instance.
  std::shared_ptr<Mailbox> open(uint64_t job, uint16_t stage);
  // A fan-in's consumer has several previous daemons: a frame from producer p carries p in
  // the high 16 bits of its micro-batch index, and must come from previousKeys[p].
  void authorize(uint64_t job, uint16_t stage, std::vector<std::string> previousKeys, const std::string& nextKey);
  // Closes the route only while it is still the one that handed out `mailbox`.
  void close(uint64_t job, uint16_t stage, const Mailbox* mailbox);

  uint64_t framesDropped() const { return dropped_.load(); }

 private:
  void run();
  void route(zmq::message_t& routingId, zmq::message_t& header, zmq::message_t& payload);
  // Answers a link probe (compression::kLinkProbeJob) from any admitted key.
  void echoProbe(zmq::message_t& routingId, const compression::TensorFrame& probe);
  void drop(const std::string& why);

  struct Route {
    std::shared_ptr<Mailbox> mailbox;
    bool authorized = false;
    std::vector<std::string> previousKeys;  // one: a chain; several: a fan-in's producers
    std::string nextKey;
  };

  zmq::socket_t socket_;  // owned by the data thread once started
  std::string boundEndpoint_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> dropped_{0};
  LogLimiter dropLog_{"data: dropped"};  // a flood of bad frames logs a summary, not a line each
  const AccessList& access_;
  SecurityCounters& counters_;
  std::mutex mutex_;  // guards routes_
  std::map<std::pair<uint64_t, uint16_t>, Route> routes_;
};

}  // namespace skytrain::daemon
