// AllocationMeter: the bytes LibTorch's CPU allocator handed out on this thread since the
// meter started and that are still alive — what a forward leaves for its backward (the
// activation stash), whatever other threads of the daemon allocate meanwhile. Used to
// measure a TorchScript stage's stash at admission, where no formula knows the module.
#pragma once

#include <cstdint>

namespace skytrain::stages {

class AllocationMeter {
 public:
  AllocationMeter();  // starts counting this thread's CPU tensor allocations
  ~AllocationMeter();
  AllocationMeter(const AllocationMeter&) = delete;
  AllocationMeter& operator=(const AllocationMeter&) = delete;

  // Allocated on this thread since construction and not yet freed (on any thread).
  int64_t liveBytes() const;

  struct Count;  // shared with the blocks it counted (allocation_meter.cpp)

 private:
  Count* count_;
};

}  // namespace skytrain::stages
