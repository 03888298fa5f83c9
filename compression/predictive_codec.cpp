// "<inner>+pred": the inner codec carries the activation less a prediction both ends make
// from the micro-batch's token IDs, which neither sends (compression/side_tokens.h): row
// (b, t) of a [B, T, d] tensor is predicted as by_token[id(b, t)] + by_position[t]. Early in
// a causal LM's stack the residual stream is mostly its token's and its position's
// embeddings, so what is left to quantise is a fraction of the activation's energy (a
// quarter to a twentieth on the demo GPT's block-2 boundary, docs/EXPERIMENTS.md), and
// the inner codec's error, which scales with its input's magnitude, shrinks with it.
//
// The two tables start at zero and learn only from what the receiver decodes: after each
// message, with r' the decoded residual and rate 1/2,
//   by_token[k]    += rate * mean of r' over the rows whose token is k,
//   by_position[t] += rate * mean over b of (r'(b, t) - rate * that mean for id(b, t)).
// The sender decodes its own message to learn the same r', so the tables stay equal at both
// ends: the updates are the same float operations on the same bytes in the same order. The
// tables are the codec's state (saved in checkpoints at both ends).
//
// Error bound: the inner codec's, on the residual: x - x' = r - r'. Size: the inner codec's
// for the same shape. The inner codec's NaN/Inf handling applies to the residual.
#include <torch/torch.h>

#include <cstring>

#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/side_tokens.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

constexpr float kRate = 0.5f;
// A table's floats: 2^26 (256 MB) is a vocabulary of 65,536 at d = 1,024.
constexpr int64_t kMaxTableFloats = int64_t{1} << 26;

class PredictiveCodec final : public Codec, public TokenConditioned {
 public:
  explicit PredictiveCodec(CodecPtr inner) : inner_(std::move(inner)) {}

  std::string spec() const override { return inner_->spec() + "+pred"; }

  void setTokens(const at::Tensor& ids) override {
    if (ids.dim() != 2 || ids.is_floating_point()) {
      throw Error("codec \"" + spec() + "\": token IDs must be an integer [B, T] tensor");
    }
    at::Tensor copy = ids.to(torch::kCPU, torch::kLong).contiguous();
    if (copy.numel() > 0 && copy.min().item<int64_t>() < 0) throw Error("codec \"" + spec() + "\": a negative token ID");
    ids_ = std::move(copy);
  }

  EncodedTensor encode(const at::Tensor& input) override {
    const at::Tensor x = floatInput(spec(), input);
    const Dims dims = prepare(x.sizes().vec(), false);
    at::Tensor residual = torch::empty_like(x);
    predict(dims, x.data_ptr<float>(), residual.data_ptr<float>(), -1.f);
    EncodedTensor out = inner_->encode(residual);
    const at::Tensor decoded = inner_->decode(out).to(torch::kFloat).contiguous();
    learn(dims, decoded.data_ptr<float>());
    out.codec = spec();
    out.dtype = encodedHeader(spec(), input).dtype;
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    const Dims dims = prepare(encoded.shape, true);
    EncodedTensor inner = encoded;
    inner.codec = inner_->spec();
    inner.dtype = WireDType::Float32;
    const at::Tensor residual = inner_->decode(inner).to(torch::kFloat).contiguous();
    if (residual.numel() != dims.rows * dims.d) throw WireError("codec \"" + spec() + "\": the inner codec's tensor has the wrong size");
    at::Tensor out = torch::empty({dims.rows / dims.t, dims.t, dims.d}, torch::kFloat);
    predict(dims, residual.data_ptr<float>(), out.data_ptr<float>(), 1.f);
    learn(dims, residual.data_ptr<float>());
    return out.to(toScalarType(encoded.dtype));
  }

  CodecState state() const override {
    CodecState out = prefixedState("inner/", inner_->state());
    if (d_ > 0) {
      out.emplace_back("by_token", tableTensor(byToken_));
      out.emplace_back("by_position", tableTensor(byPosition_));
    }
    return out;
  }

  void loadState(const CodecState& state) override {
    inner_->loadState(stateUnder("inner/", state));
    at::Tensor token, position;
    for (const auto& [name, tensor] : state) {
      if (name == "by_token") {
        token = tensor;
      } else if (name == "by_position") {
        position = tensor;
      } else if (name.rfind("inner/", 0) != 0) {
        throw WireError("codec " + spec() + ": unexpected state \"" + name + "\"");
      }
    }
    d_ = 0;
    byToken_.clear();
    byPosition_.clear();
    if (!token.defined() && !position.defined()) return;  // the stream had not begun
    if (!token.defined() || !position.defined()) throw WireError("codec " + spec() + ": one of its two tables is missing");
    for (const at::Tensor* t : {&token, &position}) {
      if (t->dim() != 2 || t->scalar_type() != torch::kFloat || t->size(1) < 1 || t->size(1) != token.size(1) ||
          t->numel() > kMaxTableFloats) {
        throw WireError("codec " + spec() + ": its tables must be float32 [rows, d] with one d and at most " +
                        std::to_string(kMaxTableFloats) + " entries each");
      }
    }
    d_ = token.size(1);
    byToken_ = tableVector(token);
    byPosition_ = tableVector(position);
  }

 private:
  struct Dims {
    int64_t rows = 0;  // B * T
    int64_t t = 0;
    int64_t d = 0;
  };

  // The message's dimensions, checked against the token IDs; grows the tables to cover them.
  Dims prepare(const std::vector<int64_t>& shape, bool fromWire) {
    auto fail = [&](const std::string& what) {
      const std::string message = "codec \"" + spec() + "\": " + what;
      if (fromWire) throw WireError(message);
      throw Error(message);
    };
    if (!ids_.defined()) throw Error("codec \"" + spec() + "\" needs the micro-batch's token IDs (setTokens)");
    if (shape.size() != 3 || shape[0] != ids_.size(0) || shape[1] != ids_.size(1) || shape[2] < 1) {
      fail("a tensor of shape " + describe(shape) + " does not match token IDs of shape [" + std::to_string(ids_.size(0)) +
           ", " + std::to_string(ids_.size(1)) + "] (it must be [B, T, d])");
    }
    if (d_ > 0 && shape[2] != d_) fail("the stream's width was " + std::to_string(d_) + ", this tensor's is " + std::to_string(shape[2]));
    d_ = shape[2];
    const int64_t vocab = ids_.numel() > 0 ? ids_.max().item<int64_t>() + 1 : 0;
    if (vocab > kMaxTableFloats / d_ || shape[1] > kMaxTableFloats / d_) {
      fail("its tables would pass " + std::to_string(kMaxTableFloats) + " floats");
    }
    if (static_cast<int64_t>(byToken_.size()) < vocab * d_) byToken_.resize(static_cast<size_t>(vocab * d_), 0.f);
    if (static_cast<int64_t>(byPosition_.size()) < shape[1] * d_) byPosition_.resize(static_cast<size_t>(shape[1] * d_), 0.f);
    return {shape[0] * shape[1], shape[1], d_};
  }

  // out = in + sign * (by_token[id] + by_position[t]), row by row.
  void predict(const Dims& dims, const float* in, float* out, float sign) const {
    const int64_t* id = ids_.data_ptr<int64_t>();
    for (int64_t row = 0; row < dims.rows; ++row) {
      const float* token = byToken_.data() + id[row] * dims.d;
      const float* position = byPosition_.data() + (row % dims.t) * dims.d;
      const float* x = in + row * dims.d;
      float* y = out + row * dims.d;
      for (int64_t j = 0; j < dims.d; ++j) y[j] = x[j] + sign * (token[j] + position[j]);
    }
  }

  // The tables' update from the decoded residual (the header's formulas).
  void learn(const Dims& dims, const float* residual) {
    const int64_t* id = ids_.data_ptr<int64_t>();
    const int64_t vocab = static_cast<int64_t>(byToken_.size()) / dims.d;
    slot_.assign(static_cast<size_t>(vocab), -1);
    seen_.clear();
    counts_.clear();
    means_.clear();
    for (int64_t row = 0; row < dims.rows; ++row) {
      int32_t& s = slot_[static_cast<size_t>(id[row])];
      if (s < 0) {
        s = static_cast<int32_t>(seen_.size());
        seen_.push_back(id[row]);
        counts_.push_back(0);
        means_.resize(means_.size() + static_cast<size_t>(dims.d), 0.f);
      }
      ++counts_[static_cast<size_t>(s)];
      float* sum = means_.data() + s * dims.d;
      const float* r = residual + row * dims.d;
      for (int64_t j = 0; j < dims.d; ++j) sum[j] += r[j];
    }
    for (size_t s = 0; s < seen_.size(); ++s) {
      float* mean = means_.data() + static_cast<int64_t>(s) * dims.d;
      float* token = byToken_.data() + seen_[s] * dims.d;
      const float count = static_cast<float>(counts_[s]);
      for (int64_t j = 0; j < dims.d; ++j) {
        mean[j] /= count;
        token[j] += kRate * mean[j];
      }
    }
    const int64_t batch = dims.rows / dims.t;
    sums_.assign(static_cast<size_t>(dims.d), 0.f);
    for (int64_t t = 0; t < dims.t; ++t) {
      std::fill(sums_.begin(), sums_.end(), 0.f);
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t row = b * dims.t + t;
        const float* mean = means_.data() + slot_[static_cast<size_t>(id[row])] * dims.d;
        const float* r = residual + row * dims.d;
        for (int64_t j = 0; j < dims.d; ++j) sums_[j] += r[j] - kRate * mean[j];
      }
      float* position = byPosition_.data() + t * dims.d;
      for (int64_t j = 0; j < dims.d; ++j) position[j] += kRate * (sums_[j] / static_cast<float>(batch));
    }
  }

  at::Tensor tableTensor(const std::vector<float>& table) const {
    at::Tensor out = torch::empty({static_cast<int64_t>(table.size()) / d_, d_}, torch::kFloat);
    std::memcpy(out.data_ptr<float>(), table.data(), table.size() * sizeof(float));
    return out;
  }

  static std::vector<float> tableVector(const at::Tensor& t) {
    const at::Tensor c = t.contiguous();
    return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }

  static std::string describe(const std::vector<int64_t>& shape) {
    std::string out = "[";
    for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
    return out + "]";
  }

  CodecPtr inner_;
  at::Tensor ids_;
  int64_t d_ = 0;                  // the stream's width, 0 before its first message
  std::vector<float> byToken_;     // [vocab seen so far, d]
  std::vector<float> byPosition_;  // [T, d]
  // learn()'s scratch, kept between messages.
  std::vector<int32_t> slot_;
  std::vector<int64_t> seen_;
  std::vector<int64_t> counts_;
  std::vector<float> means_;
  std::vector<float> sums_;
};

}  // namespace

TokenConditioned* tokenConditioned(Codec& codec) { return dynamic_cast<TokenConditioned*>(&codec); }

bool needsTokens(const std::string& spec) {
  const std::string suffix = "+pred";
  return spec.size() >= suffix.size() && spec.compare(spec.size() - suffix.size(), suffix.size(), suffix) == 0;
}

CodecPtr makePredictiveCodec(const std::string& argument, CodecPtr inner) {
  if (!argument.empty()) throw Error("\"pred\" takes no argument");
  if (!inner) throw Error("\"pred\" needs a codec left of it for the residual, e.g. \"q13+pred\"");
  if (tokenConditioned(*inner)) throw Error("\"pred\" stands once, outermost");
  return std::make_unique<PredictiveCodec>(std::move(inner));
}

}  // namespace skytrain::compression
