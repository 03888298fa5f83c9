#include "stages/allocation_meter.h"

#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace skytrain::stages {

// Shared by the meter and the blocks it counted: a block may outlive its meter.
struct AllocationMeter::Count {
  std::atomic<int64_t> live{0};
};

namespace {

thread_local std::shared_ptr<AllocationMeter::Count> meterOfThread;

// Passes every allocation to the allocator it replaced; one made on a metered thread is
// recorded (its pointer, its size, its meter) and handed out with countedFree as deleter.
// The data pointer stays the context, as the default allocator's, so raw_allocate works.
class CountingAllocator : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  // LibTorch 2.3 made Allocator::allocate non-const.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override {
#else
  c10::DataPtr allocate(size_t n) const override {
#endif
    c10::DataPtr inner = base_->allocate(n);
    const auto& meter = meterOfThread;
    if (!meter || n == 0 || inner.get() != inner.get_context() || !base_->raw_deleter()) return inner;
    void* data = inner.release_context();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      counted_[data] = {meter, static_cast<int64_t>(n)};
    }
    meter->live += static_cast<int64_t>(n);
    return {data, data, &countedFree, inner.device()};
  }
  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }
  // Pure virtual in LibTorch 2.x (Allocator::clone copies through it); 1.13 has none, so
  // no `override`. CPU memory: a plain copy, as the default allocator's.
  void copy_data(void* dest, const void* src, std::size_t count) const {
    if (count > 0) std::memcpy(dest, src, count);
  }

  static void countedFree(void* data) {
    CountingAllocator& self = instance();
    {
      std::lock_guard<std::mutex> lock(self.mutex_);
      const auto it = self.counted_.find(data);
      if (it != self.counted_.end()) {
        it->second.first->live -= it->second.second;
        self.counted_.erase(it);
      }
    }
    self.base_->raw_deleter()(data);
  }

  // Installed once, over the allocator LibTorch had (the default CPU allocator).
  static CountingAllocator& instance() {
    static CountingAllocator* allocator = [] {
      auto* made = new CountingAllocator(c10::GetCPUAllocator());
      c10::SetCPUAllocator(made, /*priority=*/0);
      return made;
    }();
    return *allocator;
  }

 private:
  c10::Allocator* base_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, std::pair<std::shared_ptr<AllocationMeter::Count>, int64_t>> counted_;
};

}  // namespace

AllocationMeter::AllocationMeter() {
  CountingAllocator::instance();
  auto count = std::make_shared<Count>();
  count_ = count.get();
  meterOfThread = std::move(count);
}

AllocationMeter::~AllocationMeter() { meterOfThread.reset(); }

int64_t AllocationMeter::liveBytes() const { return count_->live.load(); }

}  // namespace skytrain::stages
