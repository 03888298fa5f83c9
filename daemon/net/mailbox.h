// Mailbox: the inbound frames of one hosted stage, handed from the data thread to the
// stage worker thread. The only state the two share; guarded by its own mutex.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "compression/wire/tensor_frame.h"

namespace skytrain::daemon {

class FrameQueue {
 public:
  void push(compression::TensorFrame frame) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      frames_.push_back(std::move(frame));
    }
    ready_.notify_one();
  }

  // The oldest frame, or nullopt when none arrives within timeout.
  std::optional<compression::TensorFrame> pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [this] { return !frames_.empty(); })) return std::nullopt;
    compression::TensorFrame frame = std::move(frames_.front());
    frames_.pop_front();
    return frame;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<compression::TensorFrame> frames_;
};

// Frames for one (job, stage): from the previous stage (forward, eval, probe) and from the
// next stage (backward, probe reply). Each queue is FIFO, and ZeroMQ keeps one link's frames in order.
struct Mailbox {
  FrameQueue fromPrevious;
  FrameQueue fromNext;
};

}  // namespace skytrain::daemon
