// Codec throughput, side by side with memcpy of the same buffer on the same thread.
// Usage: codec_bench [--threads N] [--seconds S] [--only SPEC,SPEC...] [--shape RxC]   (prints a Markdown table;
// --only takes any codec spec, e.g. "q13,int8+zstd"; a "+pred" spec gets random byte token IDs,
// the rows as 128-token sequences, and is timed over its cycle of prediction::kLearnEvery
// messages (one of which teaches its tables), so the times are per message with learning
// included; --shape times one shape, R a multiple of 128, in place of 4096x768 and 4096x4096)
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "compression/codec_registry.h"
#include "compression/kernels/prediction_kernels.h"
#include "compression/side_tokens.h"
#include "daemon/ops/allocator.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds per call of fn over repeated calls lasting about `budget` seconds.
template <typename Fn>
double timeIt(Fn&& fn, double budget) {
  fn();  // warm-up
  std::vector<double> samples;
  const auto start = Clock::now();
  while (samples.size() < 5 || (std::chrono::duration<double>(Clock::now() - start).count() < budget && samples.size() < 200)) {
    const auto t0 = Clock::now();
    fn();
    samples.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1;
  double budget = 0.5;
  std::string only;
  std::vector<std::vector<int64_t>> shapes = {{4096, 768}, {4096, 4096}};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--shape") {
      const std::string text = argv[i + 1];
      const size_t x = text.find('x');
      const int64_t rows = x == std::string::npos ? 0 : std::atoll(text.c_str());
      const int64_t cols = x == std::string::npos ? 0 : std::atoll(text.c_str() + x + 1);
      if (rows <= 0 || rows % 128 != 0 || cols <= 0) {
        std::fprintf(stderr, "codec_bench: --shape takes RxC with R a positive multiple of 128, got %s\n", text.c_str());
        return 2;
      }
      shapes = {{rows, cols}};
    }
    if (std::string(argv[i]) == "--only") only = "," + std::string(argv[i + 1]) + ",";
    if (std::string(argv[i]) == "--threads") threads = std::stoi(argv[i + 1]);
    if (std::string(argv[i]) == "--seconds") budget = std::stod(argv[i + 1]);
  }
  torch::set_num_threads(threads);
  skytrain::daemon::keepFreedMemory();  // as skytraind does: freed tensors keep their pages
  std::vector<std::string> specs = {"none", "fp16", "bf16", "int8", "int4", "int4+rot", "int3", "int3+rot", "q13", "q13+rot", "ef(int4+rot)", "int8+rot+svd:0.2", "ef(int8)", "topk:0.05", "topk:0.01",
                                          "int8+topk:0.05", "svd:rank=8", "fp16+svd:rank=8", "svd:rank=64", "fp16+svd:0.2"};
  if (!only.empty()) {  // "none" (the memcpy row's peer) and the listed specs, in their order
    std::vector<std::string> kept = {"none"};
    for (size_t start = 1; start < only.size();) {
      const size_t end = only.find(',', start);
      const std::string spec = only.substr(start, end - start);
      if (!spec.empty() && spec != "none") kept.push_back(spec);
      start = end + 1;
    }
    specs = kept;
  }
  for (const auto& spec : specs) {  // a spec the registry refuses ends the run before any timing
    try {
      skytrain::compression::builtinCodecs().make(spec);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "codec_bench: %s\n", e.what());
      return 2;
    }
  }
  std::printf("torch threads: %d\n\n", threads);
  std::printf("| shape | codec | encode GB/s | decode GB/s | memcpy GB/s | encode/memcpy | decode/memcpy | encode ms | ratio |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& shape : shapes) {
    torch::manual_seed(1);
    // Activation-like input: a decaying spectrum plus noise.
    const int64_t inner = 64;
    const at::Tensor x = (torch::mm(torch::randn({shape[0], inner}) * torch::exp(-torch::arange(inner) / 16.0),
                                    torch::randn({inner, shape[1]})) + 0.1 * torch::randn(shape)).contiguous();
    const size_t bytes = x.numel() * sizeof(float);
    std::vector<char> destination(bytes);
    const double memcpySeconds = timeIt([&] { std::memcpy(destination.data(), x.data_ptr(), bytes); }, budget);
    const double memcpyRate = bytes / memcpySeconds / 1e9;
    for (const auto& spec : specs) {
      if (shape[1] == 4096 && spec == "fp16+svd:0.2") continue;  // rank 819: minutes, not a link codec
      auto codec = skytrain::compression::builtinCodecs().make(spec);
      at::Tensor input = x;
      int cycle = 1;  // messages a sample
      if (auto* conditioned = skytrain::compression::tokenConditioned(*codec)) {
        // "+pred": the rows as 128-token sequences of byte-level token IDs.
        input = x.view({shape[0] / 128, 128, shape[1]});
        conditioned->setTokens(torch::randint(0, 256, {shape[0] / 128, 128}, torch::kLong));
        cycle = static_cast<int>(skytrain::compression::prediction::kLearnEvery);
      }
      skytrain::compression::EncodedTensor encoded;
      const double encodeSeconds = timeIt([&] {
        for (int i = 0; i < cycle; ++i) encoded = codec->encode(input);
      }, budget) / cycle;
      const double decodeSeconds = timeIt([&] {
        for (int i = 0; i < cycle; ++i) codec->decode(encoded);
      }, budget) / cycle;
      std::printf("| %lldx%lld | `%s` | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.1fx |\n",
                  static_cast<long long>(shape[0]), static_cast<long long>(shape[1]), spec.c_str(),
                  bytes / encodeSeconds / 1e9, bytes / decodeSeconds / 1e9, memcpyRate,
                  memcpySeconds / encodeSeconds, memcpySeconds / decodeSeconds, encodeSeconds * 1e3,
                  static_cast<double>(bytes) / encoded.payload.size());
      std::fflush(stdout);
    }
  }
  return 0;
}
