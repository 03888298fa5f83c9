// splitmix64: the mixing function every reproducible draw in stages/ seeds from, so a sample
// depends on (seed, step, sample index) alone (data order, masks, replacements).
#pragma once

#include <cstdint>
#include <vector>

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

// The examples a training step's samples [firstSample, firstSample + count) read, each drawn
// by sampleIndex (for the data sources that hold whole examples: labelled, parallel).
template <typename Example>
std::vector<const Example*> trainingPicks(const std::vector<Example>& examples, uint64_t seed, uint64_t step,
                                          int firstSample, int count, uint64_t salt) {
  std::vector<const Example*> picked;
  for (int j = 0; j < count; ++j) {
    picked.push_back(&examples[sampleIndex(seed, step, static_cast<uint64_t>(firstSample + j), salt, examples.size())]);
  }
  return picked;
}

// Validation reads its examples in order, from firstSample on, wrapping at the end.
template <typename Example>
std::vector<const Example*> validationPicks(const std::vector<Example>& examples, int firstSample, int count) {
  std::vector<const Example*> picked;
  for (int j = 0; j < count; ++j) picked.push_back(&examples[static_cast<size_t>(firstSample + j) % examples.size()]);
  return picked;
}

}  // namespace skytrain::stages
