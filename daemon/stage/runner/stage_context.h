// What every part of a running stage reads and none owns alone: the job spec, which stage
// and copy this is, its device, the frames' job key and the abort check; and StepCounters,
// the figures of a step that every part adds to as it works.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>

#include "daemon/protocol/spec/job_spec.h"

namespace skytrain::daemon {

// Thrown out of a wait when the worker is told to stop.
struct Aborted {};

struct StageContext {
  protocol::JobSpec spec;  // batchSize: this copy's share of the batch (job_spec.h, replicas)
  int stage = 0;
  int replica = 0;
  // The pipelines that train (a healing job may run on fewer than its copies): this copy's
  // place among them, which picks its share of each batch, and their number.
  int pipeline = 0;
  int pipelines = 1;
  c10::Device device = c10::Device(c10::kCPU);
  uint64_t jobKey = 0;  // the 64-bit job id of this attempt's frames
  std::function<bool()> aborted = [] { return false; };  // polled while waiting for frames

  int stages() const { return static_cast<int>(spec.stages.size()); }
  bool isFirst() const { return stage == 0; }
  bool isLast() const { return stage == stages() - 1; }
  // Throws Aborted once the worker is told to stop.
  void checkAborted() const {
    if (aborted()) throw Aborted{};
  }
};

// Reset at a step's start; read at its end.
struct StepCounters {
  double computeSeconds = 0;    // forward, backward, loss, optimizer and codec time
  double allReduceSeconds = 0;  // averaging the gradients over the stage's copies
  uint64_t bytesRaw = 0;        // what the tensors sent take uncompressed (float32 etc.)
  uint64_t rawBackward = 0;     // the part of bytesRaw sent to the previous stage
};

}  // namespace skytrain::daemon
