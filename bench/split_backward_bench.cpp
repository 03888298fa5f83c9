// ZB-H1's split backward against the whole one, on the WAN bench model's last stage (one
// block and the head): the median of forward + backward (+ W pass) iterations, one thread,
// side by side in one run. Usage: split_backward_bench [ITERATIONS]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "daemon/ops/allocator.h"
#include "stages/models/gpt.h"

namespace {

using Clock = std::chrono::steady_clock;

double medianMs(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2] * 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::max(3, std::atoi(argv[1])) : 40;
  skytrain::daemon::keepFreedMemory();  // as skytraind does: freed tensors keep their pages
  torch::set_num_threads(1);
  skytrain::stages::GptConfig c;  // deploy/wan/bench.py's MODEL, 2 stages
  c.vocabSize = 256, c.dModel = 64, c.heads = 2, c.layers = 2, c.dFf = 128, c.seqLen = 64;
  std::printf("| micro-batch | whole: F+B ms | split: F+B+W ms | split / whole |\n|---:|---:|---:|---:|\n");
  for (int b : {1, 16, 64}) {
    auto whole = skytrain::stages::makeGptStage(c, 1, 2, 7), split = skytrain::stages::makeGptStage(c, 1, 2, 7);
    split->setSplitBackward(true);
    std::vector<double> wholeTimes, splitTimes;
    const at::Tensor x = torch::randn({b, c.seqLen, c.dModel}), g = torch::randn({b, c.seqLen, c.vocabSize});
    for (int i = 0; i < iterations; ++i) {  // alternating, so drift falls on both
      auto start = Clock::now();
      whole->forward(0, x);
      whole->backward(0, g);
      wholeTimes.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      start = Clock::now();
      split->forward(0, x);
      split->backward(0, g);
      split->backwardWeights(0);
      splitTimes.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    const double w = medianMs(wholeTimes), s = medianMs(splitTimes);
    std::printf("| %d | %.3f | %.3f | %.2f |\n", b, w, s, s / w);
  }
}
