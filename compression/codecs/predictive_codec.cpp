// "<inner>+pred": the inner codec carries the activation less a prediction both ends make
// from the micro-batch's token IDs, which neither sends (compression/side_tokens.h): row
// (b, t) of a [B, T, d] tensor is predicted as by_token[id(b, t)] + by_position[t]. Early in
// a causal LM's stack the residual stream is mostly its token's and its position's
// embeddings, so what is left to quantise is a fraction of the activation's energy (a
// quarter to a twentieth on the demo GPT's block-2 boundary, docs/EXPERIMENTS.md), and
// the inner codec's error, which scales with its input's magnitude, shrinks with it.
//
// The two tables start at zero and learn only from what the receiver decodes: after every
// sixteenth message of the stream (prediction::kLearnEvery: the first, the seventeenth, ...),
// with r' its decoded residual and rate 1/2,
//   by_token[k]    += rate * mean of r' over the rows whose token is k,
//   by_position[t] += rate * mean over b of (r'(b, t) - rate * that mean for id(b, t)).
// The sender decodes those messages to learn the same r', so the tables stay equal at both
// ends: the updates are the same float operations on the same bytes in the same order. The
// tables and the message count are the codec's state (saved in checkpoints at both ends).
//
// Error bound: the inner codec's, on the residual: x - x' = r - r'. Size: the inner codec's
// for the same shape. The inner codec's NaN/Inf handling applies to the residual.
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "compression/codecs/block_codec.h"
#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/kernels/prediction_kernels.h"
#include "compression/side_tokens.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

// A table's floats: 2^26 (256 MB) is a vocabulary of 65,536 at d = 1,024.
constexpr int64_t kMaxTableFloats = int64_t{1} << 26;

class PredictiveCodec final : public Codec, public TokenConditioned {
 public:
  explicit PredictiveCodec(CodecPtr inner) : inner_(std::move(inner)) {
    // A 64-block format alone or rotated ("q13", "q13+rot", "int3", "int3+rot") runs fused,
    // in chunks that stay in cache: the same bytes as the inner codec's, in one pass.
    const std::string innerSpec = inner_->spec(), rot = "+rot";
    format_ = blockFormat(innerSpec);
    if (!format_ && innerSpec.size() > rot.size() && innerSpec.compare(innerSpec.size() - rot.size(), rot.size(), rot) == 0) {
      format_ = blockFormat(innerSpec.substr(0, innerSpec.size() - rot.size()));
      rotate_ = format_ != nullptr;
    }
  }

  std::string spec() const override { return inner_->spec() + "+pred"; }

  void setTokens(const at::Tensor& ids) override {
    if (ids.dim() != 2 || ids.is_floating_point()) {
      throw Error("codec \"" + spec() + "\": token IDs must be an integer [B, T] tensor");
    }
    at::Tensor copy = ids.to(torch::kCPU, torch::kLong).contiguous();
    if (copy.numel() > 0 && copy.min().item<int64_t>() < 0) throw Error("codec \"" + spec() + "\": a negative token ID");
    vocab_ = copy.numel() > 0 ? copy.max().item<int64_t>() + 1 : 0;
    ids_ = std::move(copy);
  }

  EncodedTensor encode(const at::Tensor& input) override {
    const at::Tensor x = floatInput(spec(), input);
    const Dims dims = prepare(x.sizes().vec(), false);
    if (dims.rows == 0) {  // nothing to predict or learn from
      EncodedTensor out = inner_->encode(x);
      out.codec = spec();
      return out;
    }
    const float* data = x.data_ptr<float>();
    EncodedTensor out;
    if (format_ != nullptr) {
      out = encodedHeader(spec(), input);
      out.payload.assign(format_->size(dims.rows * dims.d), '\0');
      const int64_t chunk = chunkRows(dims.d);
      scratch_.resize(static_cast<size_t>(chunk * dims.d));
      const bool learns = nextLearns(), fused = fusesResidual(dims.d);
      if (learns) beginLearn(dims);
      for (int64_t first = 0; first < dims.rows; first += chunk) {
        const int64_t end = std::min(dims.rows, first + chunk), n = (end - first) * dims.d;
        char* payload = out.payload.data() + format_->size(first * dims.d);  // whole 64-blocks before it
        bool finite;
        if (fused) {  // and, learning, the decoded residual into the sums, in registers
          const prediction::Sums sums = learns ? countRows(dims, first, end) : prediction::Sums{};
          finite = format_->encodeResidual(predictor(dims), first, end, data + first * dims.d, rotate_, payload,
                                           learns ? &sums : nullptr);
        } else {
          predict(dims, first, end, data + first * dims.d, scratch_.data(), -1.f);
          finite = format_->encode(scratch_.data(), n, rotate_, payload);
        }
        if (!finite) {
          --messages_;  // not sent: the stream has not moved
          throwNonFiniteOrOverflow(spec(), x);
        }
        if (!learns || fused) continue;
        format_->decode(payload, n, rotate_, scratch_.data());  // what the receiver will decode
        accumulate(dims, first, end, scratch_.data());
      }
      if (learns) finishLearn(dims);
      return out;
    }
    at::Tensor residual = torch::empty_like(x);
    predict(dims, 0, dims.rows, data, residual.data_ptr<float>(), -1.f);
    out = inner_->encode(residual);
    if (nextLearns()) {
      const at::Tensor decoded = inner_->decode(out).to(torch::kFloat).contiguous();
      beginLearn(dims);
      accumulate(dims, 0, dims.rows, decoded.data_ptr<float>());
      finishLearn(dims);
    }
    out.codec = spec();
    out.dtype = encodedHeader(spec(), input).dtype;
    return out;
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    const Dims dims = prepare(encoded.shape, true);
    if (dims.rows == 0) {
      EncodedTensor inner = encoded;
      inner.codec = inner_->spec();
      return inner_->decode(inner);
    }
    at::Tensor out = torch::empty({dims.rows / dims.t, dims.t, dims.d}, torch::kFloat);
    float* restored = out.data_ptr<float>();
    if (format_ != nullptr) {
      requirePayloadSize(spec(), encoded, format_->size(dims.rows * dims.d));
      const int64_t chunk = chunkRows(dims.d);
      scratch_.resize(static_cast<size_t>(chunk * dims.d));
      const bool learns = nextLearns(), fused = fusesResidual(dims.d);
      if (learns) beginLearn(dims);
      for (int64_t first = 0; first < dims.rows; first += chunk) {
        const int64_t end = std::min(dims.rows, first + chunk);
        const char* payload = encoded.payload.data() + format_->size(first * dims.d);
        if (fused) {  // the prediction added, and the residual learnt from, in registers
          const prediction::Sums sums = learns ? countRows(dims, first, end) : prediction::Sums{};
          format_->decodeResidual(payload, predictor(dims), first, end, rotate_, restored + first * dims.d,
                                  learns ? &sums : nullptr);
          continue;
        }
        format_->decode(payload, (end - first) * dims.d, rotate_, scratch_.data());
        if (learns) accumulate(dims, first, end, scratch_.data());
        predict(dims, first, end, scratch_.data(), restored + first * dims.d, 1.f);
      }
      if (learns) finishLearn(dims);
      return out.to(toScalarType(encoded.dtype));
    }
    EncodedTensor inner = encoded;
    inner.codec = inner_->spec();
    inner.dtype = WireDType::Float32;
    const at::Tensor residual = inner_->decode(inner).to(torch::kFloat).contiguous();
    if (residual.numel() != dims.rows * dims.d) throw WireError("codec \"" + spec() + "\": the inner codec's tensor has the wrong size");
    predict(dims, 0, dims.rows, residual.data_ptr<float>(), restored, 1.f);
    if (nextLearns()) {
      beginLearn(dims);
      accumulate(dims, 0, dims.rows, residual.data_ptr<float>());
      finishLearn(dims);
    }
    return out.to(toScalarType(encoded.dtype));
  }

  CodecState state() const override {
    CodecState out = prefixedState("inner/", inner_->state());
    if (d_ > 0) {
      out.emplace_back("by_token", tableTensor(byToken_));
      out.emplace_back("by_position", tableTensor(byPosition_));
      out.emplace_back("messages", torch::tensor(static_cast<int64_t>(messages_), torch::kLong));
    }
    return out;
  }

  void loadState(const CodecState& state) override {
    inner_->loadState(stateUnder("inner/", state));
    at::Tensor token, position, messages;
    for (const auto& [name, tensor] : state) {
      if (name == "by_token") {
        token = tensor;
      } else if (name == "by_position") {
        position = tensor;
      } else if (name == "messages") {
        messages = tensor;
      } else if (name.rfind("inner/", 0) != 0) {
        throw WireError("codec " + spec() + ": unexpected state \"" + name + "\"");
      }
    }
    d_ = 0;
    messages_ = 0;
    byToken_.clear();
    byPosition_.clear();
    if (!token.defined() && !position.defined() && !messages.defined()) return;  // the stream had not begun
    if (!token.defined() || !position.defined() || !messages.defined()) {
      throw WireError("codec " + spec() + ": its state needs by_token, by_position and messages");
    }
    if (messages.numel() != 1 || messages.scalar_type() != torch::kLong || messages.item<int64_t>() < 0) {
      throw WireError("codec " + spec() + ": its message count must be one non-negative int64");
    }
    for (const at::Tensor* t : {&token, &position}) {
      if (t->dim() != 2 || t->scalar_type() != torch::kFloat || t->size(1) < 1 || t->size(1) != token.size(1) ||
          t->numel() > kMaxTableFloats) {
        throw WireError("codec " + spec() + ": its tables must be float32 [rows, d] with one d and at most " +
                        std::to_string(kMaxTableFloats) + " entries each");
      }
    }
    d_ = token.size(1);
    messages_ = static_cast<uint64_t>(messages.item<int64_t>());
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
    const int64_t vocab = vocab_;
    if (vocab > kMaxTableFloats / d_ || shape[1] > kMaxTableFloats / d_) {
      fail("its tables would pass " + std::to_string(kMaxTableFloats) + " floats");
    }
    if (static_cast<int64_t>(byToken_.size()) < vocab * d_) byToken_.resize(static_cast<size_t>(vocab * d_), 0.f);
    if (static_cast<int64_t>(byPosition_.size()) < shape[1] * d_) byPosition_.resize(static_cast<size_t>(shape[1] * d_), 0.f);
    return {shape[0] * shape[1], shape[1], d_};
  }

  // Rows of at most ~32 kB whose elements start on a 64-block (rows * d a multiple of 64).
  static int64_t chunkRows(int64_t d) {
    const int64_t unit = 64 / std::gcd<int64_t>(d, 64);
    return unit * std::max<int64_t>(1, 8192 / (unit * d));
  }

  // Whether this message teaches the tables; counts it.
  bool nextLearns() { return messages_++ % prediction::kLearnEvery == 0; }

  prediction::Rows rows(const Dims& dims) const { return {ids_.data_ptr<int64_t>(), dims.t, dims.d}; }
  prediction::Predictor predictor(const Dims& dims) const { return {rows(dims), byToken_.data(), byPosition_.data()}; }

  // Rows [first, end): out = in + sign * (by_token[id] + by_position[t]); `in` and `out`
  // point at row `first`.
  void predict(const Dims& dims, int64_t first, int64_t end, const float* in, float* out, float sign) const {
    prediction::predict(predictor(dims), first, end, in, out, sign);
  }

  // The tables' update from the decoded residual r' (the header's formulas), in three parts:
  // beginLearn, accumulate over the rows in order (r' points at row `first`; or the fused
  // kernels add it, after countRows), finishLearn.
  void beginLearn(const Dims& dims) {
    slot_.assign(byToken_.size() / static_cast<size_t>(dims.d), -1);
    seen_.clear();
    counts_.clear();
    means_.clear();
    means_.reserve(std::min(byToken_.size(), static_cast<size_t>(dims.rows * dims.d)));
    positionSums_.assign(static_cast<size_t>(dims.t * dims.d), 0.f);
  }

  void accumulate(const Dims& dims, int64_t first, int64_t end, const float* residual) {
    const prediction::Sums sums = countRows(dims, first, end);
    prediction::accumulate(rows(dims), sums.slot, sums.tokens, sums.positions, first, end, residual);
  }

  // Counts rows [first, end) under their tokens, giving a token its slot in means_ when it is
  // new; where those rows' residuals are to be added.
  prediction::Sums countRows(const Dims& dims, int64_t first, int64_t end) {
    const int64_t* id = ids_.data_ptr<int64_t>();
    for (int64_t row = first; row < end; ++row) {
      int32_t& s = slot_[static_cast<size_t>(id[row])];
      if (s < 0) {
        s = static_cast<int32_t>(seen_.size());
        seen_.push_back(id[row]);
        counts_.push_back(0);
        means_.resize(means_.size() + static_cast<size_t>(dims.d), 0.f);
      }
      ++counts_[static_cast<size_t>(s)];
    }
    return {slot_.data(), means_.data(), positionSums_.data()};
  }

  // by_token moves by rate times each token's mean; by_position by rate times the mean over
  // b of what that leaves: (sum of r' - rate * sum of the rows' token means) / B.
  void finishLearn(const Dims& dims) {
    for (size_t s = 0; s < seen_.size(); ++s) {
      prediction::meanStep(means_.data() + static_cast<int64_t>(s) * dims.d, 1.f / static_cast<float>(counts_[s]),
                           byToken_.data() + seen_[s] * dims.d, dims.d);
    }
    meanSums_.assign(positionSums_.size(), 0.f);
    prediction::addMeans(rows(dims), dims.rows, slot_.data(), means_.data(), meanSums_.data());
    prediction::positionStep(positionSums_.data(), meanSums_.data(), 1.f / static_cast<float>(dims.rows / dims.t),
                             byPosition_.data(), static_cast<int64_t>(positionSums_.size()));
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
  const BlockFormat* format_ = nullptr;  // the fused path's format, or null
  bool rotate_ = false;
  at::Tensor ids_;
  int64_t vocab_ = 0;              // the largest of ids_, plus one
  uint64_t messages_ = 0;          // non-empty messages of the stream so far
  int64_t d_ = 0;                  // the stream's width, 0 before its first message
  std::vector<float> byToken_;     // [vocab seen so far, d]
  std::vector<float> byPosition_;  // [T, d]
  // The update's scratch, kept between messages.
  std::vector<int32_t> slot_;
  std::vector<int64_t> seen_;
  std::vector<int64_t> counts_;
  std::vector<float> means_;         // per seen token: the sum of its rows, then their mean
  std::vector<float> positionSums_;  // [T, d]
  std::vector<float> meanSums_;      // [T, d]
  std::vector<float> scratch_;       // the fused path's chunk
};

}  // namespace

TokenConditioned* tokenConditioned(Codec& codec) { return dynamic_cast<TokenConditioned*>(&codec); }

CodecPtr makePredictiveCodec(const std::string& argument, CodecPtr inner) {
  if (!argument.empty()) throw Error("\"pred\" takes no argument");
  if (!inner) throw Error("\"pred\" needs a codec left of it for the residual, e.g. \"q13+pred\"");
  if (tokenConditioned(*inner)) throw Error("\"pred\" stands once, outermost");
  return std::make_unique<PredictiveCodec>(std::move(inner));
}

}  // namespace skytrain::compression
