// Coordinator: the thread that drives one job submitted to this daemon — prepares and
// starts every stage on its daemon, waits for the end, aborts the stages on failure or
// cancel — while the control thread records the stages' reports in the JobTable.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <string>
#include <thread>

#include "daemon/job_table.h"
#include "daemon/protocol/job_spec.h"

namespace skytrain::daemon {

class Coordinator {
 public:
  Coordinator(zmq::context_t& context, JobTable& table, std::string jobId, protocol::JobSpec spec,
              std::string specText, std::string selfControl);
  ~Coordinator();  // stops and joins

  void stop() { stopping_ = true; }
  bool finished() const { return finished_.load(); }

 private:
  void run();
  void abortStages();

  zmq::context_t& context_;
  JobTable& table_;
  std::string jobId_;
  protocol::JobSpec spec_;
  std::string specText_;
  std::string selfControl_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> finished_{false};
  std::thread thread_;  // owns a DEALER per stage daemon (inside run)
};

}  // namespace skytrain::daemon
