// How skytraind sets glibc's allocator (daemon/main.cpp), shared with the benchmarks that must
// measure under the same settings (bench/codec_bench.cpp, bench/split_backward_bench.cpp).
#pragma once

#include <malloc.h>

namespace skytrain::daemon {

// Keeps freed tensor memory in the process, so a step's tensors reuse the last step's pages
// instead of fresh zero-filled ones (a page fault each 4 kB):
// - large blocks come from the heap, not a mapping of their own (below 512 MB);
// - the heap keeps up to 1 GB free at its top;
// - one arena. A thread's own arena lives in 64 MB heaps that glibc unmaps whole as soon as
//   one empties, whatever the trim threshold. The delayed update's stash emptied one every few
//   steps, and stage 0 lost 60-70 ms a step to page faults (docs/BENCHMARKS.md).
// Call first thing in main, before any thread starts. False when glibc refused a setting.
inline bool keepFreedMemory() {
  const bool arena = mallopt(M_ARENA_MAX, 1) == 1;
  const bool mmap = mallopt(M_MMAP_THRESHOLD, 512 << 20) == 1;
  const bool trim = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  return arena && mmap && trim;
}

}  // namespace skytrain::daemon
