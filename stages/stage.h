// The Stage interface: one consecutive slice of the model, run micro-batch by micro-batch.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "stages/precision.h"

namespace skytrain::stages {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Cross-entropy of token logits [..., classes] against int64 targets [...], the mean over the
// targets that are not -100 (ignored: a masked LM's unmasked positions); zero with a zero
// gradient when none is left. Stage::loss's default.
at::Tensor tokenCrossEntropy(const at::Tensor& logits, const at::Tensor& targets);

// Contract: forward(i, x) runs micro-batch i and keeps what backward needs; backward(i, g)
// back-propagates g (the gradient of the loss w.r.t. forward(i)'s output) into the
// parameters' .grad (accumulating) and returns the gradient w.r.t. the input — undefined
// when the input is not differentiable (token ids) — and releases micro-batch i's stash.
// Several micro-batches may be in flight at once, in any order the schedule picks.
// Parameter names are global: the same parameter has the same name whatever the split.
class Stage {
 public:
  virtual ~Stage() = default;
  virtual at::Tensor forward(int microBatch, const at::Tensor& input) = 0;
  virtual at::Tensor backward(int microBatch, const at::Tensor& gradOutput) = 0;
  // Forward without autograd or dropout, for validation; keeps nothing.
  virtual at::Tensor infer(const at::Tensor& input) = 0;
  // The last stage's training loss (a mean) of its output against the targets: by default
  // cross-entropy over the output's last dimension (token logits).
  virtual at::Tensor loss(const at::Tensor& output, const at::Tensor& targets);
  // The parameters that train (frozen ones are left out: no gradient, no optimizer state).
  virtual std::vector<at::Tensor> parameters() const = 0;
  // Every parameter, trainable or frozen, by global name.
  virtual NamedTensors namedParameters() const = 0;
  // Every parameter, then every buffer, by global name.
  virtual NamedTensors stateDict() const = 0;
  // Number of micro-batches whose forward state (or pending weight pass) is held.
  virtual size_t inFlight() const = 0;

  // The zero-bubble split (ZB-H1): while on, backward(i, g) leaves the weight gradients of
  // linear layers (stages::linear) for backwardWeights(i), which must run before the
  // optimizer step; the input gradient and every other parameter's are computed at once.
  // Returns whether this stage can split (false: backward computes everything).
  virtual bool setSplitBackward(bool on) { return false; }
  // Mixed precision (stages/precision.h): forward and infer under autocast to bf16 or fp16,
  // the output back in fp32. Returns whether this stage can (false: it computes in fp32).
  virtual bool setAutocast(Autocast type) { return false; }
  virtual void backwardWeights(int microBatch) {}

  // The targets of the micro-batch the next forward() or infer() runs, for a last stage
  // that also reads them as input (a translation decoder, teacher-forced) or a stage with a
  // loss of its own; others ignore them.
  virtual void setTargets(const at::Tensor& targets) {}
  // A loss of the stage's own beside the last stage's (model.subspace.sender_loss: the
  // sender's next-token loss before a cut, stages/models/gpt.h): whether the stage has one, and
  // the factor backward(i) seeds the one forward(i) computed with, set before each forward: the
  // factor the last stage's loss gets (1 / micro-batches, times the loss scale). Such a stage
  // needs its targets (setTargets) before each forward that trains.
  virtual bool hasOwnLoss() const { return false; }
  virtual void setOwnLossFactor(double factor) {}
  // The token ids of the micro-batch the next forward() or infer() runs, for a stage that
  // rebuilds part of its input from them (a subspace model's stages after the first:
  // stages/models/gpt.h); others ignore them.
  virtual void setTokens(const at::Tensor& ids) {}
  // How much of the hidden state a learned code carries at each cut this stage decodes
  // (model.subspace method "cut"), by the layer the cut is before: RMS of the decoded code over
  // RMS of the state it enters (anchor + code), in the last forward that trained. Near zero,
  // the blocks after the cut do not read the code (docs/models.md). Empty on other stages, and
  // before the first training forward.
  virtual std::map<int, double> codeShares() const { return {}; }
  // Each sender's own loss (hasOwnLoss: model.subspace.sender_loss), unweighted: its mean
  // over the forwards that trained since the last call, by the layer its cut is before.
  // Empty on other stages and when none trained.
  virtual std::map<int, double> takeSenderLosses() { return {}; }
  // Greedy decoding from the input (a decoder stage: the encoder's output), at most
  // maxTokens tokens a sample; int64 [b, <= maxTokens]. Throws on a stage that cannot.
  virtual at::Tensor generate(const at::Tensor& input, int maxTokens);
  // Parameters this stage derives from another model's tensors instead of holding them under
  // the same names (a split point's factors, from the SVD of the unfactored weight): sets
  // them from `find` (the tensor of a name, undefined when absent) and returns their names.
  virtual std::vector<std::string> adopt(const std::function<at::Tensor(const std::string&)>& find) { return {}; }
};

}  // namespace skytrain::stages
