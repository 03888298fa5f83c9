// skytraind's allocator settings (daemon/ops/allocator.h): a worker thread that frees a large
// tensor and allocates it again gets the same pages back, instead of fresh ones that fault
// 4 kB at a time. Its own test process: the settings must come before any thread starts.
#include <catch2/catch.hpp>
#include <sys/resource.h>

#include <cstdlib>
#include <thread>

#include "daemon/ops/allocator.h"

namespace {

long threadMinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt;
}

// Allocates and fills `bytes`, frees them; the minor faults that took (-1: no memory). Runs
// on the worker thread, so it makes no Catch assertions.
long faultsOfOneRound(size_t bytes) {
  const long before = threadMinorFaults();
  auto* block = static_cast<char*>(std::malloc(bytes));
  if (block == nullptr) return -1;
  volatile char* pages = block;  // every page written, and not optimised away with the free
  for (size_t i = 0; i < bytes; i += 4096) pages[i] = 1;
  const long faults = threadMinorFaults() - before;
  std::free(block);
  return faults;
}

}  // namespace

TEST_CASE("a worker thread's large blocks keep their pages from one allocation to the next") {
  REQUIRE(skytrain::daemon::keepFreedMemory());
  // 80 MB: more than a per-thread arena's 64 MB heap, and than glibc's default mmap ceiling.
  constexpr size_t kBytes = size_t{80} << 20;
  long first = 0, second = 0;
  std::thread worker([&] {
    first = faultsOfOneRound(kBytes);
    second = faultsOfOneRound(kBytes);
  });
  worker.join();
  INFO("minor faults: first round " << first << ", second round " << second);
  // The first round touched fresh pages: 20480 faults, or 40 where huge pages back the heap.
  CHECK(first >= 40);
  CHECK(second >= 0);
  CHECK(second < first / 10);
}
