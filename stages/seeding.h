// splitmix64: the mixing function every reproducible draw in stages/ seeds from, so a sample
// depends on (seed, step, sample index) alone (data order, masks, replacements).
#pragma once

#include <cstdint>

namespace skytrain::stages {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The example of `size` that training sample `sample` of step `step` reads: drawn from
// (seed, step, sample) alone; `salt` keeps data sources' draws apart.
inline uint64_t sampleIndex(uint64_t seed, uint64_t step, uint64_t sample, uint64_t salt, uint64_t size) {
  return splitmix64(splitmix64(seed ^ splitmix64(step)) ^ splitmix64(sample + salt)) % size;
}

}  // namespace skytrain::stages
