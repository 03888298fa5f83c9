#include "stages/models/subspace/subspace_modules.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "scheduler/error.h"
#include "stages/recompute.h"
#include "stages/seeding.h"
#include "stages/split_backward.h"

namespace skytrain::stages::detail {

namespace {

// Values of mean 0 and deviation `std` from (seed, name) alone, bit for bit the same on every
// IEEE-754 machine: each is the sum of four 32-bit uniform integers (Irwin-Hall, a bell
// within ±3.5 deviations), exact in a double, times one correctly rounded factor. (LibTorch's
// normal_ takes another path on AVX2 CPUs, and its float math differs between builds.)
// Scalar: float (a table) or double (the basis before Gram-Schmidt).
template <typename Scalar>
torch::Tensor drawPortable(const std::string& name, int64_t rows, int64_t columns, double std, uint64_t seed) {
  const uint64_t key = XXH64(name.data(), name.size(), seed);
  const double scale = std * std::sqrt(3.0);  // the sum's deviation is sqrt(4/12) of 2^32
  torch::Tensor out = torch::empty({rows, columns}, std::is_same_v<Scalar, float> ? torch::kFloat : torch::kDouble);
  Scalar* values = out.data_ptr<Scalar>();
  for (int64_t i = 0; i < rows * columns; ++i) {
    const uint64_t a = splitmix64(key ^ splitmix64(2 * static_cast<uint64_t>(i)));
    const uint64_t b = splitmix64(key ^ splitmix64(2 * static_cast<uint64_t>(i) + 1));
    const uint64_t sum = (a >> 32) + (a & 0xffffffffu) + (b >> 32) + (b & 0xffffffffu);
    values[i] = static_cast<Scalar>((std::ldexp(static_cast<double>(sum), -32) - 2.0) * scale);
  }
  return out;
}

// Orthonormal columns of a double [rows, columns] matrix, in float, by modified Gram-Schmidt
// run twice, in double with every product-sum an explicit fma and a fixed order, so the bits
// do not depend on the CPU, the BLAS or the compiler's contraction of a*b+c.
torch::Tensor orthonormalColumns(const torch::Tensor& matrix) {
  const int64_t rows = matrix.size(0), columns = matrix.size(1);
  torch::Tensor transposed = matrix.t().contiguous();  // a column's entries side by side
  double* a = transposed.data_ptr<double>();
  const auto at = [&](int64_t r, int64_t c) -> double& { return a[c * rows + r]; };
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t j = 0; j < columns; ++j) {
      for (int64_t i = 0; i < j; ++i) {
        double dot = 0;
        for (int64_t r = 0; r < rows; ++r) dot = std::fma(at(r, i), at(r, j), dot);
        for (int64_t r = 0; r < rows; ++r) at(r, j) = std::fma(-dot, at(r, i), at(r, j));
      }
      double norm = 0;
      for (int64_t r = 0; r < rows; ++r) norm = std::fma(at(r, j), at(r, j), norm);
      norm = std::sqrt(norm);
      if (!(norm > 0)) throw Error("subspace basis: a drawn column is degenerate");
      for (int64_t r = 0; r < rows; ++r) at(r, j) /= norm;
    }
  }
  return transposed.t().contiguous().to(torch::kFloat);
}

// The file's tensor `name`, checked as checkedFileTensor does, in float64.
torch::Tensor matrix(const TensorFind& find, const std::string& name, int64_t rows, int64_t columns, const char* what) {
  return checkedFileTensor(find(name), name, rows, columns, what).to(torch::kDouble);
}

// A writer's bias, checked d_model wide and finite, in float64; undefined when it has none.
torch::Tensor writerBias(const TensorFind& find, const std::string& name, int64_t width) {
  const torch::Tensor b = find(name + ".bias");
  if (!b.defined()) return b;
  return checkedFileTensor(b.view({1, -1}), name + ".bias", 1, width, "").view({-1}).to(torch::kDouble);
}

}  // namespace

torch::Tensor checkedFileTensor(const torch::Tensor& t, const std::string& name, int64_t rows, int64_t columns, const char* what) {
  if (!t.defined()) {
    throw Error(name + ": not in the file; converting a pretrained model into the subspace form reads " + what);
  }
  const auto fits = [](int64_t size, int64_t want) { return want < 0 || size == want; };
  const auto text = [](int64_t want) { return want < 0 ? std::string("n") : std::to_string(want); };
  if (t.dim() != 2 || !fits(t.size(0), rows) || !fits(t.size(1), columns) || !t.is_floating_point()) {
    throw Error(name + ": the file's is " + c10::str(t.sizes()) + ", expected [" + text(rows) + ", " + text(columns) +
                "] floating");
  }
  if (!torch::isfinite(t).all().item<bool>()) throw Error(name + ": the file's holds a NaN or an infinity");
  return t;
}

SubspaceFrame::SubspaceFrame(int64_t vocab, int64_t width, int64_t rank, int64_t positions, uint64_t seed) {
  tokens = register_buffer("tokens", drawPortable<float>("subspace.tokens", vocab, width, 0.02, seed));
  if (positions > 0) {
    this->positions = register_buffer("positions", drawPortable<float>("subspace.positions", positions, width, 0.02, seed));
  }
  basis = register_buffer("basis", orthonormalColumns(drawPortable<double>("subspace.basis", width, rank, 1.0, seed)));
}

torch::Tensor SubspaceFrame::fixed(const torch::Tensor& ids) const {
  const torch::Tensor rows = torch::embedding(tokens, ids);
  return positions.defined() ? rows + positions.slice(0, 0, ids.size(1)) : rows;
}

torch::Tensor SubspaceFrame::tiedLogits(const torch::Tensor& h, const torch::Tensor& embedding) const {
  // The whole table first ([vocab, d], vocab·d·k more work): one [b, t, vocab] result, not
  // two added, when b·t exceeds d (any training micro-batch).
  return torch::linear(h, tokens + torch::matmul(embedding, basis.t()));
}

torch::Tensor SubspaceFrame::lift(const torch::Tensor& fixed, const torch::Tensor& coefficients) const {
  return fixed + torch::matmul(coefficients, basis.t());
}

std::vector<std::string> writerNames(int layers, const std::vector<std::string>& suffixes) {
  std::vector<std::string> names;
  for (int i = 0; i < layers; ++i) {
    for (const auto& suffix : suffixes) names.push_back("block" + std::to_string(i) + "." + suffix);
  }
  return names;
}

torch::Tensor writerBasis(const TensorFind& find, const std::vector<std::string>& writers, int64_t width, int64_t rank) {
  torch::NoGradGuard noGrad;
  // The top k eigenvectors of the writers' Gram matrix, sum of W Wᵀ (+ b bᵀ), one writer in
  // float64 at a time (a 7B model's would take 16 GB at once).
  torch::Tensor gram = torch::zeros({width, width}, torch::kDouble);
  for (const auto& name : writers) {
    const torch::Tensor w = matrix(find, name + ".weight", width, -1, "every block's output projections");
    gram += w.mm(w.t());
    if (const torch::Tensor b = writerBias(find, name, width); b.defined()) gram += torch::outer(b, b);
  }
  if (!torch::isfinite(gram).all().item<bool>()) throw Error("the output projections' Gram matrix overflows float64");
  torch::Tensor u;
  try {
    u = std::get<1>(torch::linalg_eigh(gram)).narrow(1, width - rank, rank).flip({1});
  } catch (const c10::Error& e) {
    throw Error(std::string("the output projections' Gram matrix has no eigenvectors: ") + e.what_without_backtrace());
  }
  const torch::Tensor pivots = u.abs().argmax(0, /*keepdim=*/true);
  return u * torch::where(u.gather(0, pivots) < 0, -1.0, 1.0);
}

torch::Tensor splitTable(const torch::Tensor& full, const torch::Tensor& basis, torch::Tensor& outside) {
  torch::NoGradGuard noGrad;
  const int64_t rank = basis.size(1);
  torch::Tensor inside = torch::empty({full.size(0), rank}, torch::kFloat);
  for (int64_t row = 0; row < full.size(0); row += 4096) {
    const int64_t n = std::min<int64_t>(4096, full.size(0) - row);
    const torch::Tensor rows = full.narrow(0, row, n).to(torch::kDouble);
    const torch::Tensor part = rows.mm(basis);
    inside.narrow(0, row, n).copy_(part);
    outside.narrow(0, row, n).copy_(rows - part.mm(basis.t()));
  }
  return inside;
}

std::vector<std::string> adoptPretrained(SubspaceFrame& frame, const TensorFind& find,
                                         const std::vector<std::string>& writers,
                                         const std::vector<std::pair<std::string, nn::Linear>>& own,
                                         const nn::Embedding& tok, const torch::Tensor& pos, const nn::Linear& head,
                                         bool tied) {
  const int64_t width = frame.basis.size(0), rank = frame.basis.size(1);
  const torch::Tensor table = find("tok_emb.weight");
  if (find("subspace.basis").defined() || !table.defined() || table.dim() != 2 || table.size(1) != width) return {};
  torch::NoGradGuard noGrad;
  const torch::Tensor tokens = checkedFileTensor(table, "tok_emb.weight", frame.tokens.size(0), width, "the token table");
  const auto bias = [&](const std::string& name) { return writerBias(find, name, width); };
  frame.basis.copy_(writerBasis(find, writers, width, rank));
  const torch::Tensor basis = frame.basis.to(torch::kDouble);  // as the model runs it
  // A table's part inside U (returned, it trains) and outside (frozen, into `fixed`).
  const auto split = [&](const torch::Tensor& full, torch::Tensor& fixed) { return splitTable(full, basis, fixed); };
  std::vector<std::string> set = {"subspace.tokens", "subspace.basis"};
  const torch::Tensor tokenCoefficients = split(tokens, frame.tokens);
  if (tok) {
    tok->weight.copy_(tokenCoefficients);
    set.push_back("tok_emb.weight");
  }
  if (head && tied) {
    // A tied copy: the tied matrix is the pretrained embedding again. A file with a head of
    // its own (an untied model) would lose it: refused.
    const torch::Tensor own = find("head.weight");
    const bool sameAsTable =
        !own.defined() || (own.sizes().equals(table.sizes()) && torch::equal(own.to(torch::kFloat), table.to(torch::kFloat)));
    if (!sameAsTable) {
      throw Error("head.weight: the file's head is not its embedding (an untied model); a tied subspace model "
                  "cannot keep it: set tie_embeddings to false");
    }
    head->weight.copy_(tokenCoefficients);
    set.push_back("head.weight");
  } else if (head && !find("head.weight").defined()) {
    head->weight.copy_(tokens);
    set.push_back("head.weight");
  }
  if (frame.positions.defined()) {
    const torch::Tensor positions = checkedFileTensor(find("pos_emb"), "pos_emb", frame.positions.size(0), width, "the position table");
    const torch::Tensor positionCoefficients = split(positions, frame.positions);
    set.push_back("subspace.positions");
    if (pos.defined()) {
      pos.copy_(positionCoefficients);
      set.push_back("pos_emb");
    }
  }
  for (const auto& [name, linear] : own) {
    linear->weight.copy_(basis.t().mm(matrix(find, name + ".weight", width, linear->weight.size(1), "its projections")));
    set.push_back(name + ".weight");
    if (const torch::Tensor b = bias(name); linear->bias.defined() && b.defined()) {
      linear->bias.copy_(basis.t().mv(b));
      set.push_back(name + ".bias");
    }
  }
  return set;
}

BlockFunction subspaceRecompute(std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> block,
                                int64_t rank) {
  return [block = std::move(block), rank](const torch::Tensor& stashed) {
    return block(stashed.narrow(-1, 0, rank), stashed.narrow(-1, rank, stashed.size(-1) - rank));
  };
}

torch::Tensor subspaceBlock(const BlockFunction& replay, const torch::Tensor& c, const torch::Tensor& fixed,
                            bool replayRng) {
  return recomputed(replay, torch::cat({c, fixed}, -1), replayRng);
}

void checkSubspaceInput(const torch::Tensor& input, const torch::Tensor& ids, int64_t rank) {
  if (input.dim() != 3 || input.size(2) != rank || !input.is_floating_point()) {
    throw Error("a subspace stage expects coefficients [batch, seq, " + std::to_string(rank) + "], got " +
                c10::str(input.sizes()));
  }
  if (!ids.defined() || ids.dim() != 2 || ids.size(0) != input.size(0) || ids.size(1) != input.size(1)) {
    throw Error("a subspace stage needs the token ids of its input [" + std::to_string(input.size(0)) + ", " +
                std::to_string(input.size(1)) + "] (setTokens), got " +
                (ids.defined() ? c10::str(ids.sizes()) : std::string("none")));
  }
}

SubspaceBlock::SubspaceBlock(const GptConfig& c) : dropout(c.dropout), geluTanh(c.geluTanh) {
  ln1 = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
  attn = register_module("attn", std::make_shared<Attention>(c, false, c.subspaceRank));
  ln2 = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
  fc = register_module("fc", nn::Linear(c.dModel, c.dFf));
  proj = register_module("proj", nn::Linear(c.dFf, c.subspaceRank));
}

torch::Tensor SubspaceBlock::forward(torch::Tensor coefficients, const torch::Tensor& fixed, const SubspaceFrame& frame) {
  coefficients = coefficients + attn->forward(ln1->forward(frame.lift(fixed, coefficients)), {});
  const torch::Tensor h = ln2->forward(frame.lift(fixed, coefficients));
  return coefficients + torch::dropout(linear(*proj, gelu(linear(*fc, h), geluTanh)), dropout, is_training());
}

SubspaceSlice::SubspaceSlice(const GptConfig& c, int first, int last, uint64_t seed)
    : rank(c.subspaceRank), seqLen(c.seqLen), dropout(c.dropout) {
  frame = register_module("subspace", std::make_shared<SubspaceFrame>(c.vocabSize, c.dModel, c.subspaceRank,
                                                                       c.positions > 0 ? c.positions : c.seqLen, seed));
  if (first == 0) {
    tok = register_module("tok_emb", nn::Embedding(c.vocabSize, c.subspaceRank));
    pos = register_parameter("pos_emb", torch::zeros({c.positions > 0 ? c.positions : c.seqLen, c.subspaceRank}));
  }
  for (int i = first; i < last; ++i) {
    blocks.push_back(register_module("block" + std::to_string(i), std::make_shared<SubspaceBlock>(c)));
    if (c.recompute) {
      recomputable.push_back(subspaceRecompute(
          [b = blocks.back().get(), this](const torch::Tensor& x, const torch::Tensor& f) { return b->forward(x, f, *frame); },
          rank));
    }
  }
  if (last == c.layers) {
    lnF = register_module("ln_f", nn::LayerNorm(nn::LayerNormOptions({c.dModel})));
    // Tied: the trained part of the tied matrix is the k-wide embedding (its own, or a copy).
    if (!(c.tieEmbeddings && tok)) {
      head = register_module(c.headName, nn::Linear(nn::LinearOptions(c.tieEmbeddings ? c.subspaceRank : c.dModel,
                                                                      c.vocabSize).bias(false)));
    }
    tied = c.tieEmbeddings;
  }
}

torch::Tensor SubspaceSlice::forward(const torch::Tensor& input) {
  torch::Tensor coefficients;
  torch::Tensor ids = tokens;
  if (tok) {
    if (input.scalar_type() != torch::kLong || input.dim() != 2 || input.size(1) > pos.size(0)) {
      throw Error("a subspace model's first stage expects int64 token ids [batch, <= " + std::to_string(pos.size(0)) +
                  "], got " + std::string(c10::toString(input.scalar_type())) + " " + c10::str(input.sizes()));
    }
    ids = input;
    coefficients = torch::dropout(tok->forward(input) + pos.slice(0, 0, input.size(1)), dropout, is_training());
  } else {
    checkSubspaceInput(input, ids, rank);
    coefficients = input;
  }
  const torch::Tensor fixed = frame->fixed(ids);
  for (size_t i = 0; i < blocks.size(); ++i) {
    coefficients = recomputable.empty() ? blocks[i]->forward(coefficients, fixed, *frame)
                                        : subspaceBlock(recomputable[i], coefficients, fixed, dropout > 0 && is_training());
  }
  if (!lnF) return coefficients;
  const torch::Tensor h = lnF->forward(frame->lift(fixed, coefficients));
  return tied ? frame->tiedLogits(h, head ? head->weight : tok->weight) : linear(*head, h);
}

}  // namespace skytrain::stages::detail
