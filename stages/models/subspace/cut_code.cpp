#include "stages/models/subspace/cut_code.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "scheduler/error.h"
#include "stages/models/gpt.h"
#include "stages/models/subspace/subspace_modules.h"

namespace skytrain::stages::detail {

namespace nn = torch::nn;

CutCode::CutCode(const CutShape& shape, bool send, bool receive) {
  const int64_t width = shape.width;
  if (send) encoder = register_module("encode", nn::Linear(nn::LinearOptions(width, shape.rank).bias(false)));
  if (send && shape.senderLoss > 0) {
    senderNorm = shape.senderNorm();
    register_module("sender_norm", senderNorm.ptr());
    senderHead = register_module("sender_head", nn::Linear(nn::LinearOptions(width, shape.vocab).bias(false)));
  }
  if (!receive) return;
  decoder = register_module("decode", nn::Linear(nn::LinearOptions(shape.rank, width).bias(false)));
  tokens = register_parameter("tokens", torch::zeros({shape.vocab, width}));
  if (shape.positions > 0) positions = register_parameter("positions", torch::zeros({shape.positions, width}));
}

torch::Tensor CutCode::encode(const torch::Tensor& h) const { return torch::linear(h, encoder->weight); }

torch::Tensor CutCode::senderLoss(const torch::Tensor& h, const torch::Tensor& targets) {
  if (!targets.defined() || targets.dim() != 2 || targets.size(0) != h.size(0) || targets.size(1) != h.size(1) ||
      targets.scalar_type() != torch::kLong) {
    throw Error("a stage with a sender's loss needs the int64 targets of its input [" + std::to_string(h.size(0)) +
                ", " + std::to_string(h.size(1)) + "] (setTargets), got " +
                (targets.defined() ? c10::str(targets.sizes()) : "none"));
  }
  const torch::Tensor logits = torch::linear(senderNorm.forward(h), senderHead->weight).to(torch::kFloat);
  return tokenCrossEntropy(logits, targets);
}

torch::Tensor CutCode::decode(const torch::Tensor& code, const torch::Tensor& ids) const {
  const int64_t rank = decoder->weight.size(1);
  if (code.dim() != 3 || code.size(2) != rank || !code.is_floating_point()) {
    throw Error("a stage after a cut expects its code [batch, seq, " + std::to_string(rank) + "], got " +
                c10::str(code.sizes()));
  }
  if (!ids.defined() || ids.dim() != 2 || ids.size(0) != code.size(0) || ids.size(1) != code.size(1) ||
      ids.scalar_type() != torch::kLong) {
    throw Error("a stage after a cut needs the int64 token ids of its input [" + std::to_string(code.size(0)) + ", " +
                std::to_string(code.size(1)) + "] (setTokens), got " + (ids.defined() ? c10::str(ids.sizes()) : "none"));
  }
  if (ids.numel() > 0) {
    const auto [low, high] = torch::aminmax(ids);
    if (low.item<int64_t>() < 0 || high.item<int64_t>() >= tokens.size(0)) {
      throw Error("a stage after a cut got token ids outside the vocabulary [0, " + std::to_string(tokens.size(0)) + ")");
    }
  }
  if (positions.defined() && code.size(1) > positions.size(0)) {
    throw Error("sequence length " + std::to_string(code.size(1)) + " exceeds the model's " +
                std::to_string(positions.size(0)));
  }
  const torch::Tensor decoded = torch::linear(code, decoder->weight);
  torch::Tensor h = torch::embedding(tokens, ids) + decoded;
  if (positions.defined()) h = h + positions.slice(0, 0, code.size(1));
  if (torch::GradMode::is_enabled() && h.numel() > 0) {  // RMS ratio = ratio of the norms
    torch::NoGradGuard noGrad;
    share = decoded.to(torch::kFloat).norm() / h.to(torch::kFloat).norm().clamp_min(1e-30);
  }
  return h;
}

void checkCuts(const char* family, int rank, const std::vector<int>& cuts, int64_t width, int layers, int sharedRank,
               double senderLoss) {
  const std::string name(family);
  if (!(senderLoss >= 0) || !std::isfinite(senderLoss) || (senderLoss > 0 && rank == 0)) {
    throw Error(name + ": a sender's loss weight " + std::to_string(senderLoss) +
                " needs a code at the cuts and is finite, >= 0");
  }
  if (rank < 0 || rank > width) {
    throw Error(name + ": cut code rank " + std::to_string(rank) + " is not in [1, d_model " + std::to_string(width) + "]");
  }
  if (rank > 0 && sharedRank > 0) throw Error(name + ": a model has one subspace method, shared or at its cuts");
  for (size_t i = 0; i < cuts.size() && rank > 0; ++i) {
    if (cuts[i] <= 0 || cuts[i] >= layers || (i > 0 && cuts[i] <= cuts[i - 1])) {
      throw Error(name + ": the cuts must be ascending layers within (0, " + std::to_string(layers) + "), got " +
                  std::to_string(cuts[i]) + " at " + std::to_string(i));
    }
  }
}

SliceCuts::SliceCuts(const std::vector<int>& cuts, int first, int last, CutShape shape)
    : cuts_(cuts), first_(first), last_(last), shape_(std::move(shape)) {}

void SliceCuts::registerBefore(nn::Module& owner, int layer) {
  if (layer < first_ || layer > last_ || std::find(cuts_.begin(), cuts_.end(), layer) == cuts_.end()) return;
  const bool send = layer > first_, receive = layer < last_;
  codes_[layer] = owner.register_module("cut" + std::to_string(layer),
                                        std::make_shared<CutCode>(shape_, send, receive));
}

torch::Tensor SliceCuts::enter(const torch::Tensor& input, const torch::Tensor& ids) const {
  senderLoss_ = torch::Tensor();  // a new forward
  const auto it = codes_.find(first_);
  return it == codes_.end() ? input : it->second->decode(input, ids);
}

torch::Tensor SliceCuts::inside(int layer, const torch::Tensor& h, const torch::Tensor& ids) const {
  const auto it = codes_.find(layer);
  if (it == codes_.end() || layer == first_) return h;
  addSenderLoss(*it->second, h);
  return it->second->decode(it->second->encode(h), ids);
}

torch::Tensor SliceCuts::leave(const torch::Tensor& h) const {
  const auto it = codes_.find(last_);
  if (it == codes_.end()) return h;
  addSenderLoss(*it->second, h);
  return it->second->encode(h);
}

bool SliceCuts::hasSenderLoss() const {
  return std::any_of(codes_.begin(), codes_.end(), [](const auto& item) { return !item.second->senderNorm.is_empty(); });
}

torch::Tensor SliceCuts::takeSenderLoss() { return std::exchange(senderLoss_, torch::Tensor()); }

void SliceCuts::addSenderLoss(CutCode& code, const torch::Tensor& h) const {
  if (code.senderNorm.is_empty() || !code.is_training() || !torch::GradMode::is_enabled()) return;
  const torch::Tensor own = code.senderLoss(h, targets_);
  const torch::Tensor loss = own * shape_.senderLoss;
  senderLoss_ = senderLoss_.defined() ? senderLoss_ + loss : loss;
  code.senderSum = code.senderSum.defined() ? code.senderSum + own.detach() : own.detach();
  ++code.senderCount;
}

std::map<int, double> SliceCuts::takeSenderLosses() {
  std::map<int, double> losses;
  for (const auto& [layer, code] : codes_) {
    if (code->senderCount == 0) continue;
    const double mean = code->senderSum.item<double>() / code->senderCount;
    if (std::isfinite(mean)) losses[layer] = mean;  // a step with a non-finite state has none
    code->senderSum = torch::Tensor();
    code->senderCount = 0;
  }
  return losses;
}

void hookCuts(ModuleHooks& hooks, std::shared_ptr<SliceCuts> cuts) {
  hooks.codeShares = [cuts] { return cuts->codeShares(); };
  hooks.parameters = [cuts, all = hooks.parameters] { return cuts->stageOrder(all()); };
  if (!cuts->hasSenderLoss()) return;
  hooks.setTargets = [cuts](const at::Tensor& targets) { cuts->setTargets(targets); };
  hooks.ownLoss = [cuts] { return cuts->takeSenderLoss(); };
  hooks.takeSenderLosses = [cuts] { return cuts->takeSenderLosses(); };
}

NamedTensors SliceCuts::stageOrder(NamedTensors named) const {
  for (const auto& [layer, code] : codes_) {
    if (!code->encoder || !code->decoder) continue;  // one side only: as it is
    const std::string prefix = "cut" + std::to_string(layer) + ".";
    auto inCut = [&](const auto& item) { return item.first.rfind(prefix, 0) == 0; };
    const auto begin = std::find_if(named.begin(), named.end(), inCut);
    const auto end = std::find_if_not(begin, named.end(), inCut);
    std::stable_partition(begin, end, [&](const auto& item) {
      return item.first.rfind(prefix + "encode.", 0) == 0 || item.first.rfind(prefix + "sender_", 0) == 0;
    });
  }
  return named;
}

std::map<int, double> SliceCuts::codeShares() const {
  std::map<int, double> shares;
  for (const auto& [layer, code] : codes_) {
    if (!code->share.defined()) continue;
    const double share = code->share.item<double>();
    if (std::isfinite(share)) shares[layer] = share;  // a step with a non-finite state has none
  }
  return shares;
}

std::vector<std::string> SliceCuts::adopt(const std::function<torch::Tensor(const std::string&)>& find,
                                          const std::function<std::vector<std::string>(int)>& writers, int layers) {
  std::vector<std::string> set;
  const torch::Tensor table = find("tok_emb.weight");
  if (!table.defined()) return set;
  // A file that is itself a model with codes (or a stage's checkpoint of one) loads by name,
  // and only where its codes are at cuts of this model: its blocks were trained around them,
  // so neither converting it nor dropping a code is the model it holds.
  std::vector<int> fileCuts;
  bool elsewhere = false;
  for (int layer = 1; layer < layers; ++layer) {
    const std::string name = "cut" + std::to_string(layer);
    if (!find(name + ".encode.weight").defined() && !find(name + ".decode.weight").defined()) continue;
    fileCuts.push_back(layer);
    elsewhere = elsewhere || std::find(cuts_.begin(), cuts_.end(), layer) == cuts_.end();
  }
  if (elsewhere) {
    throw Error("the file is a model with learned codes before layers " + c10::str(c10::ArrayRef<int>(fileCuts)) +
                ", this one cuts before " + c10::str(c10::ArrayRef<int>(cuts_)) +
                ": a model with codes loads only with the same cuts (its stages must start at the same layers)");
  }
  if (!fileCuts.empty()) return {};
  torch::NoGradGuard noGrad;
  // The tables each receiving side splits, checked once.
  torch::Tensor tokens, positions;
  for (const auto& [layer, code] : codes_) {
    if (!code->decoder || tokens.defined()) continue;
    tokens = checkedFileTensor(table, "tok_emb.weight", shape_.vocab, shape_.width, "the token table");
    if (shape_.positions > 0) {
      positions = checkedFileTensor(find("pos_emb"), "pos_emb", shape_.positions, shape_.width, "the position table");
    }
  }
  for (const auto& [layer, code] : codes_) {
    const std::string name = "cut" + std::to_string(layer);
    const torch::Tensor basis = writerBasis(find, writers(layer), shape_.width, shape_.rank);
    if (code->encoder) {
      code->encoder->weight.copy_(basis.t());
      set.push_back(name + ".encode.weight");
    }
    if (!code->decoder) continue;
    code->decoder->weight.copy_(basis);
    splitTable(tokens, basis, code->tokens);
    set.insert(set.end(), {name + ".decode.weight", name + ".tokens"});
    if (positions.defined()) {
      splitTable(positions, basis, code->positions);
      set.push_back(name + ".positions");
    }
  }
  return set;
}

}  // namespace skytrain::stages::detail

namespace skytrain::stages {

double cutCodeStashFloats(int rank, const std::vector<int>& cuts, int firstLayer, int lastLayer, double seqLen,
                          int64_t width, int64_t senderVocab) {
  double floats = 0;
  for (const int layer : cuts) {  // a code and the hidden state rebuilt from it
    if (rank > 0 && layer >= firstLayer && layer <= lastLayer) floats += seqLen * (rank + width);
    // A sender's loss: its logits and their gradient, as the last stage's.
    if (rank > 0 && layer > firstLayer && layer <= lastLayer) floats += 2.0 * seqLen * senderVocab;
  }
  return floats;
}

int64_t cutCodeParameterCount(int rank, const std::vector<int>& cuts, int firstLayer, int lastLayer, int64_t vocab,
                              int64_t width, int64_t positions, int64_t senderHead) {
  int64_t count = 0;
  for (const int layer : cuts) {
    if (rank <= 0 || layer < firstLayer || layer > lastLayer) continue;
    if (layer > firstLayer) count += width * rank + senderHead;                     // encode (its loss's head)
    if (layer < lastLayer) count += rank * width + (vocab + positions) * width;     // decode, anchor
  }
  return count;
}

}  // namespace skytrain::stages
