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

}  // namespace skytrain::stages
