// A learned code at a cut (model.subspace method "cut"; GptConfig::cutRank): the module each
// stage beside a cut holds, and the slice's walk over its cuts. Internal to the stages
// library (it includes Torch): stages/models/gpt.h and llama.h are the interfaces.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "stages/module_stage.h"
#include "stages/stage.h"

namespace skytrain::stages::detail {

// What a model's codes are built with.
struct CutShape {
  int64_t vocab = 0, width = 0, rank = 0;
  int64_t positions = 0;  // rows of the anchor's position table; 0: none (a LLaMA: rotary)
  double senderLoss = 0;  // GptConfig::senderLoss; > 0: each sender has a head of its own
  std::function<torch::nn::AnyModule()> senderNorm;  // the family's norm, d_model wide
};

// The two sides of the cut before layer `layer`, "cut<layer>": the sender's `encode`
// (d_model -> k) and the receiver's `decode` (k -> d_model) with its anchor, a token table
// `tokens` [vocab, d_model] and (GPT) a position table `positions` [positions, d_model]. A
// stage holding only one side has only its parameters; a stage the cut falls inside, both.
// With a sender's loss the sender side also has `sender_norm` and `sender_head` (d_model ->
// vocab), its own next-token prediction from the state it encodes.
struct CutCode : torch::nn::Module {
  CutCode(const CutShape& shape, bool send, bool receive);
  // The k numbers a token the sender sends: h [b, t, d] -> [b, t, k].
  torch::Tensor encode(const torch::Tensor& h) const;
  // The sender's own next-token loss of h [b, t, d] against `targets` [b, t] (int64, -100
  // ignored), unweighted. Throws skytrain::Error when the targets do not match h.
  torch::Tensor senderLoss(const torch::Tensor& h, const torch::Tensor& targets);
  // The receiver's hidden state from the code [b, t, k] and the token ids [b, t]:
  // tokens[ids] (+ positions[t]) + decode(code). Throws skytrain::Error on a code of another
  // width or ids that do not match it or are out of the vocabulary.
  torch::Tensor decode(const torch::Tensor& code, const torch::Tensor& ids) const;

  torch::nn::Linear encoder{nullptr}, decoder{nullptr};
  torch::nn::AnyModule senderNorm;  // empty without a sender's loss
  torch::nn::Linear senderHead{nullptr};
  torch::Tensor tokens, positions;  // positions undefined for a LLaMA (rotary)
  // The last decode that trained (grad mode on): RMS of decode(code) over RMS of the state,
  // a detached scalar (read once a step: Stage::codeShares).
  mutable torch::Tensor share;
  // The sender's own losses (unweighted, detached) summed over the forwards that trained
  // since SliceCuts::takeSenderLosses, and how many: summed on the device, read once a step.
  torch::Tensor senderSum;
  int senderCount = 0;
};

// Throws skytrain::Error (naming `family`) unless `rank` is 0 or in [1, width] with `cuts`
// ascending within (0, layers), not both a shared subspace (`sharedRank` > 0) and a code, and
// `senderLoss` finite, >= 0 and 0 without a code.
void checkCuts(const char* family, int rank, const std::vector<int>& cuts, int64_t width, int layers, int sharedRank,
               double senderLoss);

// A slice's cuts: the ones at its first layer (its input is a code), inside it, and at its end
// (its output is a code), each a CutCode "cut<layer>" on the slice's module.
class SliceCuts {
 public:
  SliceCuts() = default;
  SliceCuts(const std::vector<int>& cuts, int first, int last, CutShape shape);
  // Registers the cut before `layer` on `owner`, if there is one. The slice calls it before
  // each block it registers and once for `last`, so a whole model's parameters come in the
  // order its stages' parameters do one after another (the clipping norm sums them so).
  void registerBefore(torch::nn::Module& owner, int layer);
  bool any() const { return !codes_.empty(); }
  // The slice's input as a hidden state: decoded when a cut is at its first layer, else as is.
  torch::Tensor enter(const torch::Tensor& input, const torch::Tensor& ids) const;
  // Before block `layer` of the slice (not its first): h through the cut there, if any.
  torch::Tensor inside(int layer, const torch::Tensor& h, const torch::Tensor& ids) const;
  // The slice's output: the code when a cut is at its end, else h.
  torch::Tensor leave(const torch::Tensor& h) const;
  // A sender's loss (CutShape::senderLoss): whether this slice sends from a cut, the targets
  // of its next forward, and the weighted sum of its senders' losses in the last forward that
  // trained (taken: undefined after, and after a forward without one). A forward that trains
  // without targets throws skytrain::Error.
  bool hasSenderLoss() const;
  void setTargets(const torch::Tensor& targets) { targets_ = targets; }
  torch::Tensor takeSenderLoss();
  // Stage::takeSenderLosses: each of this slice's senders' own loss, unweighted, its mean over
  // the forwards that trained since the last call, by its layer.
  std::map<int, double> takeSenderLosses();
  // The slice's parameters (`named`, its module's order) with each cut it holds both sides of
  // in the order the two stages beside that cut would hold them, the sender's first (encode,
  // its loss's head) and then the receiver's (anchor, decode): a whole model then lists its
  // parameters as its stages do one after another, and the clipping norm, a sum over them in
  // that order, is the pipeline's to the bit.
  NamedTensors stageOrder(NamedTensors named) const;
  // Stage::codeShares: each code this slice decodes that has trained, by its layer.
  std::map<int, double> codeShares() const;
  // A pretrained, unconstrained model's tensors (`find`, by its names; undefined when absent)
  // into the codes, for fine-tuning. At the cut before layer p, U is the top k directions the
  // blocks before it write (`writers(p)`: their output projections, detail::writerBasis);
  // encode is Uᵀ, decode U, and the anchor the embeddings' part outside U, so the receiver's
  // h is the embedding plus what those blocks wrote inside U: the pretrained model itself at
  // k = d_model. Returns the names it set; none when the file holds the codes themselves (a
  // model, or a stage's checkpoint, with codes at this model's cuts: they load by name) or no
  // token table. Throws skytrain::Error naming a missing, misshapen or non-finite tensor, or
  // when the file has a code (looked up before each of `layers`, the whole model's) at a layer
  // this model does not cut.
  std::vector<std::string> adopt(const std::function<torch::Tensor(const std::string&)>& find,
                                 const std::function<std::vector<std::string>(int)>& writers, int layers);

 private:
  // Adds the sender's loss of the code at h, if it has one and the forward trains.
  void addSenderLoss(CutCode& code, const torch::Tensor& h) const;

  std::vector<int> cuts_;
  int first_ = 0, last_ = 0;
  CutShape shape_;
  std::map<int, std::shared_ptr<CutCode>> codes_;
  torch::Tensor targets_;
  mutable torch::Tensor senderLoss_;
};

// The hooks a stage with codes has whatever its family: codeShares, its parameters in stage
// order, and with a sender's loss its targets, that loss and its values. `cuts` is the
// slice's own (an aliasing pointer that keeps the slice alive).
void hookCuts(ModuleHooks& hooks, std::shared_ptr<SliceCuts> cuts);

}  // namespace skytrain::stages::detail
