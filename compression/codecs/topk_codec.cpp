// "topk:<fraction>": keeps exactly k = max(1, ceil(fraction * numel)) elements of largest
// magnitude (ties go to the lower index) and zeros the rest. Error bound per element: a
// dropped element is no larger in magnitude than the smallest kept one; kept elements
// carry their inner codec's error ("none": exact). NaN/Inf inputs are refused. Size:
// 4 + 2*8 + inner(k values) + 4*k (int32 indices).
//
// torch::topk runs at ~0.2 GB/s here, slower than a 1 Gbit/s link; instead a threshold is
// estimated from a fixed sample, one pass keeps the candidates above it, and nth_element
// over the candidates picks exactly k. Should the estimate keep fewer than k, it falls back
// to nth_element over everything.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

constexpr int64_t kSampleSize = 8192;

struct Candidate {
  float magnitude;
  int32_t index;
};

// Indices of exactly k largest |x| (ties: lower index), in no particular order. `scratch`
// is reused across calls so the hot path allocates nothing after the first message.
void selectTopK(const float* x, int64_t n, int64_t k, std::vector<Candidate>& scratch, std::vector<int32_t>& out) {
  out.clear();
  scratch.resize(static_cast<size_t>(n));
  int64_t count = 0;
  if (k < n && n > 8 * kSampleSize) {
    std::vector<float> sample(kSampleSize);
    uint64_t state = 0x9e3779b97f4a7c15ULL;
    for (auto& s : sample) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      s = std::fabs(x[(state >> 17) % static_cast<uint64_t>(n)]);
    }
    // Aim for ~1.5k candidates so the estimate rarely undershoots.
    const double keep = std::min(1.0, 1.5 * static_cast<double>(k) / n + 16.0 / kSampleSize);
    const auto rank = static_cast<int64_t>(std::floor((1.0 - keep) * (kSampleSize - 1)));
    std::nth_element(sample.begin(), sample.begin() + rank, sample.end());
    const float threshold = sample[rank];
    Candidate* c = scratch.data();
    for (int64_t i = 0; i < n; ++i) {  // branchless compaction
      const float m = std::fabs(x[i]);
      c[count] = {m, static_cast<int32_t>(i)};
      count += m >= threshold;
    }
  }
  if (count < k) {
    for (int64_t i = 0; i < n; ++i) scratch[i] = {std::fabs(x[i]), static_cast<int32_t>(i)};
    count = n;
  }
  auto larger = [](const Candidate& a, const Candidate& b) {
    return a.magnitude > b.magnitude || (a.magnitude == b.magnitude && a.index < b.index);
  };
  if (count > k) std::nth_element(scratch.begin(), scratch.begin() + k, scratch.begin() + count, larger);
  out.resize(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) out[i] = scratch[i].index;
}

class TopKCodec : public Codec {
 public:
  TopKCodec(double fraction, std::string argument, CodecPtr inner)
      : fraction_(fraction), argument_(std::move(argument)), inner_(std::move(inner)) {}

  std::string spec() const override { return chainSpec(*inner_, "topk:" + argument_); }
  CodecState state() const override { return prefixedState("inner.", inner_->state()); }
  void loadState(const CodecState& state) override {
    for (const auto& entry : state) {
      if (entry.first.rfind("inner.", 0) != 0) throw WireError("topk: unexpected state \"" + entry.first + "\"");
    }
    inner_->loadState(stateUnder("inner.", state));
  }

  int64_t keep(int64_t n) const {
    if (n == 0) return 0;
    return std::min(n, std::max<int64_t>(1, static_cast<int64_t>(std::ceil(fraction_ * n - 1e-9))));
  }

  EncodedTensor encode(const at::Tensor& input) override {
    const at::Tensor x = floatInput("topk", input).view({-1});
    requireFinite("topk", x);
    const int64_t n = x.numel();
    if (n > std::numeric_limits<int32_t>::max()) throw Error("topk: tensors over 2^31 elements are not supported");
    selectTopK(x.data_ptr<float>(), n, keep(n), scratch_, indices_);
    const std::vector<int32_t>& indices = indices_;
    at::Tensor values = torch::empty({static_cast<int64_t>(indices.size())}, torch::kFloat);
    const float* data = x.data_ptr<float>();
    float* out = values.data_ptr<float>();
    for (size_t i = 0; i < indices.size(); ++i) out[i] = data[indices[i]];
    std::string indexBytes(indices.size() * 4, '\0');
    if (!indices.empty()) std::memcpy(indexBytes.data(), indices.data(), indexBytes.size());
    EncodedTensor encoded = encodedHeader(spec(), input);
    encoded.payload = packParts({encodePart(*inner_, values), indexBytes});
    return encoded;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    const int64_t n = elementCount(encoded.shape), k = keep(n);
    auto parts = unpackParts("topk", encoded.payload, 2);
    if (parts[1].size() != static_cast<size_t>(k) * 4) {
      throw WireError("topk: " + std::to_string(parts[1].size()) + " index bytes, " + std::to_string(k) +
                      " indices need " + std::to_string(4 * k));
    }
    const at::Tensor values = decodePart(*inner_, std::move(parts[0]), {k}).to(torch::kFloat).contiguous();
    at::Tensor out = torch::zeros({n}, torch::kFloat);
    float* data = out.data_ptr<float>();
    const float* v = values.data_ptr<float>();
    for (int64_t i = 0; i < k; ++i) {
      int32_t index;
      std::memcpy(&index, parts[1].data() + 4 * i, 4);
      if (index < 0 || index >= n) throw WireError("topk: index " + std::to_string(index) + " is outside [0, " + std::to_string(n) + ")");
      data[index] = v[i];
    }
    return out.view(encoded.shape).to(toScalarType(encoded.dtype));
  }

 private:
  double fraction_;
  std::string argument_;
  CodecPtr inner_;
  std::vector<Candidate> scratch_;  // encode's working memory, kept between messages
  std::vector<int32_t> indices_;
};

}  // namespace

CodecPtr makeTopKCodec(const std::string& argument, CodecPtr inner) {
  if (argument.empty()) throw Error("codec \"topk\" needs a fraction, e.g. \"topk:0.05\"");
  const double fraction = parseFraction("topk", argument, 0.0, 1.0);
  return std::make_unique<TopKCodec>(fraction, argument, inner ? std::move(inner) : makeNoneCodec("", nullptr));
}

}  // namespace skytrain::compression
