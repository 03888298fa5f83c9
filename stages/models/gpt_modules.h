// The zoo's torch::nn modules: attention, adapters, transformer blocks (whole, with a
// split point, with cross-attention) and a slice of the stack. Internal to the stages
// library (it includes Torch): stages/models/gpt.h and stages/models/translation.h are the interfaces.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "stages/models/subspace/cut_code.h"
#include "stages/models/gpt.h"
#include "stages/recompute.h"

namespace skytrain::stages::detail {

namespace nn = torch::nn;

// Whether a parameter name ends with `suffix` (initialisation rules go by name).
bool endsWith(const std::string& s, const std::string& suffix);
// A weight drawn from N(0, std²) by a generator seeded from (seed, name) alone.
at::Tensor drawWeight(const std::string& name, const std::vector<int64_t>& shape, double std, uint64_t seed);
// GELU, exact (erf) or with GPT-2's tanh approximation.
torch::Tensor gelu(const torch::Tensor& x, bool tanh);

// Multi-head attention of queries from x over keys and values from `memory` (self-attention
// when memory is x): qkv (self) or q + kv (cross) projections, then proj (d_model wide, or
// `outputs` wide: a subspace block's).
struct Attention : nn::Module {
  Attention(const GptConfig& c, bool cross, int64_t outputs = 0);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory);

  int64_t heads;
  double dropout;
  bool causal;  // self-attention only: position t sees positions <= t
  nn::Linear qkv{nullptr}, q{nullptr}, kv{nullptr}, proj{nullptr};
};

// A bottleneck adapter (Houlsby et al.): h + up(gelu(down(h))), up starting at zero so a
// pretrained model with adapters inserted computes what it computed without them.
struct Adapter : nn::Module {
  Adapter(int64_t width, int64_t bottleneck);
  torch::Tensor forward(const torch::Tensor& h);

  nn::Linear down{nullptr}, up{nullptr};
};

// A transformer block, whole or (with a split point) in part. `memory`: what the block's
// cross-attention attends to (undefined without one).
struct BlockBase : nn::Module {
  virtual torch::Tensor forward(torch::Tensor x, const torch::Tensor& memory) = 0;
};

// Pre-norm block: self-attention, [cross-attention,] MLP, each a residual branch with an
// optional adapter on its output.
struct Block : BlockBase {
  explicit Block(const GptConfig& c);
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& memory) override;

  double dropout;
  bool geluTanh;
  nn::LayerNorm ln1{nullptr}, lnCross{nullptr}, ln2{nullptr};
  std::shared_ptr<Attention> attn, cross;
  std::shared_ptr<Adapter> adapterAttn, adapterCross, adapterMlp;
  nn::Linear fc{nullptr}, proj{nullptr};
};

// The block of a split point: the factored layer's W = U S V, with the front half (the
// attention sublayer, ln2, [fc, gelu,] V) and/or the back half (S, U[, gelu, proj]).
// Parameter names match whichever halves a stage holds: fc_v, fc_s, fc_u (or proj_*).
struct FactoredBlock : BlockBase {
  FactoredBlock(const GptConfig& c, int index, bool front, bool back);
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& memory) override;
  // Sets V, S, U from the SVD of the unfactored weight W (out x in) and its bias, with
  // each singular vector's sign fixed (largest entry of U's column positive) so that two
  // stages factoring the same W agree on their halves.
  void factor(const torch::Tensor& w, const torch::Tensor& bias);
  // The unfactored layer's global names: "block<k>.fc" (or proj).
  std::string layerName() const;

  SplitPoint split;
  int index;
  bool front, back;
  int64_t dModel;
  double dropout;
  bool geluTanh;
  nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  std::shared_ptr<Attention> attn;
  nn::Linear fc{nullptr}, proj{nullptr}, v{nullptr}, s{nullptr}, u{nullptr};
};

// Blocks [first, last) plus the embeddings and/or final norm and head when the range
// touches an end (the head only when config.head).
struct GptSlice : nn::Module {
  GptSlice(const GptConfig& c, int first, int last);
  // input: token ids [b, t] on the first slice, else [b, t, width]; memory: the encoder's
  // output for cross-attention.
  torch::Tensor forward(const torch::Tensor& input, const torch::Tensor& memory = {});
  // forward() without the head: what the head would take (ln_f's output on the last slice).
  torch::Tensor features(const torch::Tensor& input, const torch::Tensor& memory = {});
  // The token ids of the micro-batch the next forward runs (a slice after the first with a
  // learned code at its cuts: GptConfig::cutRank).
  void setTokens(const torch::Tensor& ids) { tokens = ids; }

  double dropout;
  nn::Embedding tok{nullptr};
  torch::Tensor pos;
  std::vector<std::shared_ptr<BlockBase>> blocks;
  nn::LayerNorm lnF{nullptr};
  nn::Linear head{nullptr};
  bool tiedHead = false;  // the head is tok's matrix (tied embeddings, both ends in this slice)
  std::vector<BlockFunction> recomputable;  // recompute: each block's forward without memory
  int first = 0;
  SliceCuts cuts;  // GptConfig::cutRank: the learned codes at the cuts it touches
  torch::Tensor tokens;
};

// GPT-2's rule for every parameter of `module`, from (seed, its global name) alone: norms at
// one, biases, adapters' up and cross-attention's output projection at zero, output
// projections at the residual scale, the rest at 0.02 (a tied head drawn as the embedding).
void initialiseParameters(nn::Module& module, const GptConfig& c, uint64_t seed);
// GPT-2 initialisation of every parameter from (seed, its name within the slice) alone;
// adapters' up projections and cross-attention's output projection start at zero; a split
// point's factors come from the SVD of the weight the unfactored layer would draw.
void initialise(GptSlice& slice, const GptConfig& c, uint64_t seed);
// Throws skytrain::Error on bad sizes or a bad range.
void validate(const GptConfig& c, int first, int last);

}  // namespace skytrain::stages::detail
