// "svd:<ratio>" or "svd:rank=<r>": low-rank factors of the tensor seen as a matrix
// [rows = numel / last dim, cols = last dim] (an activation [tokens, hidden]). ratio keeps
// r = max(1, round(ratio * min(rows, cols))) singular values, as in the source article's
// SVD(0.6); rank=r keeps min(r, min(rows, cols)). Sends L = U_r * S_r [rows, r] and
// R = V_r^T [r, cols], each through the inner codec; the receiver computes L * R.
//
// Factors come from a randomized SVD (Halko et al.): r + 8 Gaussian probes, two power
// iterations with QR re-orthonormalisation, then an exact SVD of the small projected
// matrix. Error bound: at full rank the input is reproduced to float32 rounding
// (|err| <= 1e-4 * max|x| in the contract test); below it, the Frobenius error is within a
// few percent of the optimal rank-r error on spectra that decay. NaN/Inf inputs are
// refused. Size: 4 + 2*8 + inner(rows*r) + inner(r*cols).
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>

#include "compression/codec_util.h"
#include "compression/codecs.h"
#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

constexpr int64_t kOversample = 8;
constexpr int kPowerIterations = 2;

std::pair<int64_t, int64_t> matrixShape(const std::vector<int64_t>& shape, int64_t numel) {
  const int64_t cols = shape.empty() ? 1 : shape.back();
  return {cols == 0 ? 0 : numel / cols, cols};
}

at::Tensor orthonormal(const at::Tensor& y) { return std::get<0>(torch::linalg_qr(y, "reduced")); }

class SvdCodec : public Codec {
 public:
  SvdCodec(double ratio, int64_t rank, std::string argument, CodecPtr inner)
      : ratio_(ratio), rank_(rank), argument_(std::move(argument)), inner_(std::move(inner)) {}

  std::string spec() const override { return chainSpec(*inner_, "svd:" + argument_); }

  int64_t rankFor(int64_t rows, int64_t cols) const {
    const int64_t full = std::min(rows, cols);
    if (full == 0) return 0;
    if (rank_ > 0) return std::min(rank_, full);
    return std::clamp<int64_t>(std::llround(ratio_ * static_cast<double>(full)), 1, full);
  }

  EncodedTensor encode(const at::Tensor& input) override {
    const at::Tensor x = floatInput("svd", input);
    requireFinite("svd", x);
    const auto [rows, cols] = matrixShape(input.sizes().vec(), x.numel());
    const int64_t r = rankFor(rows, cols);
    at::Tensor left = torch::zeros({rows, r}), right = torch::zeros({r, cols});
    if (r > 0) std::tie(left, right) = factor(x.view({rows, cols}), r);
    EncodedTensor encoded = encodedHeader(spec(), input);
    encoded.payload = packParts({encodePart(*inner_, left), encodePart(*inner_, right)});
    return encoded;
  }

  CodecState state() const override {
    CodecState out = prefixedState("inner.", inner_->state());
    out.emplace_back("generator", generator_.get_state());
    return out;
  }

  void loadState(const CodecState& state) override {
    for (const auto& [name, tensor] : state) {
      if (name == "generator") {
        if (tensor.scalar_type() != torch::kByte || tensor.dim() != 1) throw WireError("svd: generator state is not bytes");
        try {
          generator_.set_state(tensor);
        } catch (const c10::Error& e) {
          throw WireError(std::string("svd: bad generator state: ") + e.what_without_backtrace());
        }
      } else if (name.rfind("inner.", 0) != 0) {
        throw WireError("svd: unexpected state \"" + name + "\"");
      }
    }
    inner_->loadState(stateUnder("inner.", state));
  }

  at::Tensor decode(const EncodedTensor& encoded) override {
    const auto [rows, cols] = matrixShape(encoded.shape, elementCount(encoded.shape));
    const int64_t r = rankFor(rows, cols);
    auto parts = unpackParts("svd", encoded.payload, 2);
    const at::Tensor left = decodePart(*inner_, std::move(parts[0]), {rows, r}).to(torch::kFloat);
    const at::Tensor right = decodePart(*inner_, std::move(parts[1]), {r, cols}).to(torch::kFloat);
    const at::Tensor out = r > 0 ? torch::mm(left, right) : torch::zeros({rows, cols});
    return out.view(encoded.shape).to(toScalarType(encoded.dtype));
  }

 private:
  std::pair<at::Tensor, at::Tensor> factor(const at::Tensor& a, int64_t r) {
    const int64_t k = std::min(r + kOversample, std::min(a.size(0), a.size(1)));
    at::Tensor probes = torch::empty({a.size(1), k});
    probes.normal_(0.0, 1.0, generator_);
    at::Tensor q = orthonormal(torch::mm(a, probes));
    for (int i = 0; i < kPowerIterations; ++i) {
      q = orthonormal(torch::mm(a, orthonormal(torch::mm(a.t(), q))));
    }
    const auto [ub, s, vh] = torch::linalg_svd(torch::mm(q.t(), a), /*full_matrices=*/false);
    at::Tensor left = torch::mm(q, ub.narrow(1, 0, r)) * s.narrow(0, 0, r);
    return {left.contiguous(), vh.narrow(0, 0, r).contiguous()};
  }

  double ratio_;
  int64_t rank_;
  std::string argument_;
  CodecPtr inner_;
  at::Generator generator_ = at::make_generator<at::CPUGeneratorImpl>(0x5eed);
};

}  // namespace

CodecPtr makeSvdCodec(const std::string& argument, CodecPtr inner) {
  double ratio = 0;
  int64_t rank = 0;
  if (argument.rfind("rank=", 0) == 0) {
    const std::string value = argument.substr(5);
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos || value.size() > 9 ||
        std::stoll(value) < 1) {
      throw Error("codec \"svd\" needs rank=<positive integer>, got \"" + argument + "\"");
    }
    rank = std::stoll(value);
  } else if (argument.empty()) {
    throw Error("codec \"svd\" needs a ratio or a rank, e.g. \"svd:0.6\" or \"svd:rank=8\"");
  } else {
    ratio = parseFraction("svd", argument, 0.0, 1.0);
  }
  return std::make_unique<SvdCodec>(ratio, rank, argument, inner ? std::move(inner) : makeNoneCodec("", nullptr));
}

}  // namespace skytrain::compression
