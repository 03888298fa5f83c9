// The planner's projection (not a measurement) of training LLaMA 1B and 7B across two
// clouds joined by one slow link. For each model, link and memory setting: the fewest
// pipeline stages whose every stage fits one accelerator, the step time scheduler::makePlan
// predicts with them (the first half of the stages in cloud A, the rest in cloud B), and the
// throughput ratio to one cloud (the same stages, every link fast). Stage sizes are the
// daemon's own estimates: stages::ModelSource::weightBytes and stashBytesPerSample of the
// `llama-1b` / `llama-7b` presets, as admission computes them. Every input is an assumption,
// printed above the table.
//
// Usage: llm_projection [link_gbit_per_s]...   (default: 1 10)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/protocol/spec/model_presets.h"
#include "scheduler/error.h"
#include "scheduler/planner.h"
#include "stages/models/model_source.h"

using namespace skytrain;
using scheduler::PlannerInput;

namespace {

constexpr double kGpuBytes = 80e9;  // an H100-class accelerator; no headroom kept for the CUDA context
constexpr int kSeqLen = 2048;
constexpr int kBatch = 512;  // sequences per step, the whole job's
constexpr double kOpSeconds = 1e-3;  // per forward or backward of one micro-batch: launches, framing
constexpr double kFastBytesPerSecond = 100e9 / 8, kFastDelay = 5e-6;  // inside a cloud, each copy's NIC
constexpr double kSlowDelay = 0.020;  // one way between the clouds
constexpr double kMessageSeconds = 50e-6;
constexpr double kHeaderBytes = 64;
constexpr int kZeroCopies = 8;

struct Setting {
  const char* name;
  bool bf16;       // autocast: weights cast per operation, activations half the bytes, the bf16 FLOP rate
  bool recompute;  // the config's recompute flag: stashBytesPerSample keeps block inputs only
  int copies;      // data-parallel copies of each stage in its cluster, sharing AdamW state (ZeRO-1)
  double flopsPerSecond() const { return bf16 ? 400e12 : 200e12; }  // sustained; fp32 via TF32
  // fp32 master weights, fp32 gradients, AdamW's two fp32 moments over the copies (autocast
  // keeps no bf16 copy of the weights: it casts them per operation, as precision.h does).
  double bytesPerParameter() const { return 4 + 4 + 8.0 / copies; }
  double activationScale() const { return bf16 ? 0.5 : 1.0; }  // the source's estimate is float32
  double flopsPerToken() const { return recompute ? 8 : 6; }      // x parameters: one more forward
};

struct Wire {
  const char* name;
  double bytesPerElement;  // of an activation or its gradient crossing the slow link
  // A subspace model (model.subspace): k numbers a token cross every link, the slow one
  // at bytesPerElement, instead of d_model; 0: the unconstrained model.
  int subspaceRank = 0;
  // method "cut": dense blocks and a learned code at each cut (a vocab x d_model anchor, a
  // k x d_model decode and a d_model x k encode more) instead of the shared subspace.
  bool learnedCode = false;
  // model.subspace.sender_loss: a d_model x vocab head more at each stage before a cut (its
  // parameters, optimizer state, FLOPs and logits counted as the model source counts them).
  bool senderLoss = false;
  // When set, k = d_model / rankDivisor for each model (the recipe's code scales with the width).
  int rankDivisor = 0;
};

// One cut of the model into stages, as the daemon's model source sees it.
struct Cut {
  stages::ModelConfig config;
  std::unique_ptr<stages::ModelSource> source;
  double maxFixedBytes = 0;  // the heaviest stage's weights, gradients and optimizer state
  int needed = 0;  // fittedCut: the fewest stages that fit (a one-stage fit still runs two)
};

int stageCount(const Cut& cut) { return static_cast<int>(cut.config.stages.size()); }

// The fields model_spec_parser.cpp copies from a preset, as model_setup.cpp's llamaConfig
// maps them, with this bench's sequence length.
stages::LlamaConfig llamaOf(const protocol::ModelPreset& p, bool recompute) {
  stages::LlamaConfig c;
  c.vocabSize = p.vocabSize, c.dModel = p.dModel, c.heads = p.heads, c.kvHeads = p.kvHeads;
  c.layers = p.layers, c.dFf = p.dFf, c.ropeTheta = p.ropeTheta, c.tieEmbeddings = p.tieEmbeddings;
  c.seqLen = kSeqLen;
  c.recompute = recompute;
  return c;
}

// Layer boundaries for p stages that minimise the largest stage's parameters (memory decides
// the stage count, and the embedding and head weigh on the end stages).
std::vector<int> splitLayers(const stages::LlamaConfig& c, int p) {
  const int layers = c.layers;
  std::vector<std::vector<double>> worst(p + 1, std::vector<double>(layers + 1, 1e300));
  std::vector<std::vector<int>> from(p + 1, std::vector<int>(layers + 1, 0));
  worst[0][0] = 0;
  for (int s = 1; s <= p; ++s) {
    for (int last = s; last <= layers; ++last) {
      for (int first = s - 1; first < last; ++first) {
        const double w = std::max(worst[s - 1][first], double(stages::llamaParameterCount(c, first, last)));
        if (w < worst[s][last]) worst[s][last] = w, from[s][last] = first;
      }
    }
  }
  std::vector<int> bounds(p + 1, layers);
  for (int s = p; s > 0; --s) bounds[s - 1] = from[s][bounds[s]];
  return bounds;
}

Cut cutModel(const protocol::ModelPreset& preset, const Setting& setting, const Wire& wire, int p) {
  Cut cut;
  cut.config.kind = "llama";
  cut.config.llama = llamaOf(preset, setting.recompute);
  const std::vector<int> bounds = splitLayers(cut.config.llama, p);
  for (int s = 0; s < p; ++s) cut.config.stages.push_back({bounds[s], bounds[s + 1], "", {}});
  if (wire.learnedCode && p > 1) {  // the codes sit at the boundaries the dense model's split drew
    cut.config.llama.cutRank = wire.subspaceRank;
    cut.config.llama.cuts.assign(bounds.begin() + 1, bounds.end() - 1);
    cut.config.llama.senderLoss = wire.senderLoss ? 1.0 : 0.0;
  }
  // Builds no stage: weightBytes and stashBytesPerSample are arithmetic on the config.
  cut.source = stages::makeModelSource(cut.config);
  for (int s = 0; s < p; ++s) {
    cut.maxFixedBytes = std::max(cut.maxFixedBytes, cut.source->weightBytes(s) / 4 * setting.bytesPerParameter());
  }
  return cut;
}

// Parameters that take part in a matrix product: not the input embedding nor a learned
// code's anchor table, lookups both.
double matmulParameters(const Cut& cut, int s) {
  const auto& c = cut.config.llama;
  const bool lookupOnly = s == 0 && !(c.tieEmbeddings && stageCount(cut) == 1);
  const bool anchor = c.cutRank > 0 && s > 0;  // every later stage begins at a cut
  return cut.source->weightBytes(s) / 4 - (lookupOnly || anchor ? double(c.vocabSize) * c.dModel : 0.0);
}

double maxStashPerSample(const Cut& cut, const Setting& setting) {
  double most = 0;
  for (int s = 0; s < stageCount(cut); ++s) most = std::max(most, cut.source->stashBytesPerSample(s));
  return most * setting.activationScale();
}

double ringAllReduceSeconds(int copies, double bytes) {
  if (copies < 2) return 0;
  return 2.0 * (copies - 1) / copies * bytes / kFastBytesPerSecond + 2.0 * (copies - 1) * kFastDelay;
}

// The planner's input for one cut; slowBytesPerSecond 0: every link inside one cloud.
PlannerInput plannerInput(const Cut& cut, const Setting& setting, const Wire& wire, double slowBytesPerSecond) {
  const int p = stageCount(cut);
  const auto& c = cut.config.llama;
  PlannerInput in;
  in.replicas = setting.copies;
  in.batchSize = kBatch / setting.copies;
  in.memoryBudgetBytes = kGpuBytes - cut.maxFixedBytes;  // as stage_host.cpp: budget less fixed memory
  for (int s = 0; s < p; ++s) {
    scheduler::StageProfile stage;
    const double flopsPerSample = matmulParameters(cut, s) * kSeqLen / setting.flopsPerSecond();
    stage.forwardSeconds = {kOpSeconds, 2 * flopsPerSample};
    stage.backwardSeconds = {kOpSeconds, (setting.flopsPerToken() - 2) * flopsPerSample};
    stage.stashBytesPerSample = cut.source->stashBytesPerSample(s) * setting.activationScale();
    // fp32 gradients; ZeRO-1's reduce-scatter and parameter all-gather move the same bytes.
    stage.allReduceSeconds = ringAllReduceSeconds(setting.copies, cut.source->weightBytes(s));
    in.stages.push_back(stage);
  }
  const int slowLink = slowBytesPerSecond > 0 ? (p - 1) / 2 : -1;  // cloud A holds ceil(p/2) stages
  for (int k = 0; k + 1 < p; ++k) {
    const bool slow = k == slowLink;
    // The planner shares a link's bandwidth among the copies' pipelines; inside a cloud each
    // copy has a NIC of its own, so only the slow link is shared.
    in.links.push_back({slow ? slowBytesPerSecond : kFastBytesPerSecond * setting.copies,
                        slow ? kSlowDelay : kFastDelay, kMessageSeconds});
    const double perElement = slow ? wire.bytesPerElement : 2.0;  // bf16 inside a cloud
    const double width = wire.subspaceRank > 0 ? wire.subspaceRank : c.dModel;
    const scheduler::CodecOption codec{slow ? wire.name : "bf16", {}, {kHeaderBytes, double(kSeqLen) * width * perElement}};
    in.forwardCodecs.push_back({codec});
    in.backwardCodecs.push_back({codec});
  }
  // A tied embedding's fp32 gradient crosses every link, as profiler.cpp reports it; a tied
  // shared-subspace model's tied copy is vocab x k (the learned codes keep the dense table).
  const double tiedWidth = wire.subspaceRank > 0 && !wire.learnedCode ? wire.subspaceRank : c.dModel;
  if (c.tieEmbeddings) in.tiedBytes.assign(in.links.size(), 4.0 * c.vocabSize * tiedWidth);
  return in;
}

std::optional<scheduler::Plan> tryPlan(const PlannerInput& in) {
  if (in.memoryBudgetBytes <= 0) return std::nullopt;
  try {
    return scheduler::makePlan(in);
  } catch (const Error&) {
    return std::nullopt;  // no micro-batch count fits
  }
}

// The fewest stages whose every stage fits an accelerator under some plan; 0 when none does.
int stagesNeeded(const protocol::ModelPreset& preset, const Setting& setting, const Wire& wire) {
  for (int p = 1; p <= preset.layers; ++p) {
    if (tryPlan(plannerInput(cutModel(preset, setting, wire, p), setting, wire, 0))) return p;
  }
  return 0;
}

// The cut a setting runs with a wire: the fewest stages that fit (at least two, one per
// cloud), the learned codes' tables included; what fits does not depend on the link.
Cut fittedCut(const protocol::ModelPreset& preset, const Setting& setting, const Wire& wire) {
  const int needed = stagesNeeded(preset, setting, wire);
  if (needed == 0) throw Error(preset.name + " " + wire.name + " does not fit " + setting.name);
  Cut cut = cutModel(preset, setting, wire, std::max(2, needed));
  cut.needed = needed;
  return cut;
}

std::string gigabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> links;
  for (int i = 1; i < argc; ++i) links.push_back(std::atof(argv[i]));
  if (links.empty()) links = {1, 10};
  const std::vector<Setting> settings = {{"fp32", false, false, 1},
                                         {"bf16", true, false, 1},
                                         {"bf16+recompute", true, true, 1},
                                         {"bf16+recompute+ZeRO-1 (8 copies)", true, true, kZeroCopies}};
  // docs/BENCHMARKS.md, "Exactly 8x: q13" and "q13+pred": both formats are 32 bytes a
  // 64-block, 8.0x fewer bytes than fp32.
  // The subspace rows: k = 64 of llama-7b's 4096 (64x fewer numbers), in bf16 and with q13.
  // The learned codes at the cuts (method "cut") send the same k numbers; their stages hold more.
  // The last: the recipe that kept quality where depth pays on the CPU's models
  // (docs/BENCHMARKS.md, "A learned code at each cut"): k = d_model / 16 in bf16, 32x fewer
  // bytes than fp32, with the sender's own loss.
  const std::vector<Wire> wires = {{"bf16", 2.0},
                                   {"q13+pred/q13+rot", 0.5},
                                   {"subspace k=64, bf16", 2.0, 64},
                                   {"subspace k=64, q13", 0.5, 64},
                                   {"cut code k=64, bf16", 2.0, 64, true},
                                   {"cut code k=64, q13", 0.5, 64, true},
                                   {"cut code k=d/16, bf16, sender's loss", 2.0, 0, true, true, 16}};
  std::printf(
      "Projection by scheduler::makePlan, not a measurement. Assumed:\n"
      "- accelerators: %.0f GB each (H100-class); %.0f TFLOP/s sustained in bf16, %.0f TFLOP/s fp32 (TF32)\n"
      "- %d-token sequences, a global batch of %d sequences; the planner picks the micro-batch count m\n"
      "- FLOPs per token 6N (8N with recompute: one more forward), N the stage's parameters less the input\n"
      "  embedding; %.0f ms per micro-batch forward or backward on top\n"
      "- memory per parameter: fp32 weights 4 B + gradients 4 B + AdamW 8 B (bf16 casts per operation);\n"
      "  ZeRO-1 divides AdamW over R = %d copies of each stage in its cluster (%d pipelines, R x stages GPUs)\n"
      "- activation stash: stages::ModelSource::stashBytesPerSample (float32), halved in bf16; a stage fits\n"
      "  when its weights, gradients, optimizer state and the plan's stash fit one accelerator\n"
      "- stages split to balance parameters; cloud A holds the first ceil(p/2), cloud B the rest; a model\n"
      "  that fits one stage still runs two, one per cloud\n"
      "- links inside a cloud: %.0f Gbit/s, %.0f us one way, bf16 on the wire (2 B an element); between\n"
      "  clouds: the given rate, %.0f ms one way, bf16 or the q13+pred/q13+rot pair (0.5 B an element,\n"
      "  docs/BENCHMARKS.md \"Exactly 8x: q13\"); codec time not counted; %.0f us per message\n"
      "- subspace rows (model.subspace): k = 64 numbers a token cross every link instead\n"
      "  of d_model, in bf16 (2 B) or q13 (0.5 B) on the slow link; the compute is the unconstrained model's\n"
      "  (the subspace's smaller output projections are not credited); cut code rows (method \"cut\"):\n"
      "  the same bytes, dense blocks, and each stage after a cut holds its code and a vocab x d_model anchor;\n"
      "  k=d/16 with the sender's loss: k = d_model / 16, and each stage before a cut a d_model x vocab head\n"
      "  more (parameters, optimizer state, 6N FLOPs and its logits in the stash)\n"
      "- gradients all-reduced in fp32 by a ring inside each cluster; llama-1b's tied embedding gradient\n"
      "  (fp32, uncompressed; vocab x k as a shared-subspace model) crosses every link once a step each way, in\n"
      "  every copy's pipeline\n"
      "- single cloud: the same stages and copies, every link the fast one; ratio = its step time / this\n\n",
      kGpuBytes / 1e9, 400.0, 200.0, kSeqLen, kBatch, kOpSeconds * 1e3, kZeroCopies, kZeroCopies,
      kFastBytesPerSecond * 8 / 1e9, kFastDelay * 1e6, kSlowDelay * 1e3, kMessageSeconds * 1e6);
  std::printf("| model | link | setting | bytes/param | stash/sample | stages needed | GPUs | slow-link wire | m "
              "| schedule | step s (predicted) | of which tied s | single-cloud step s | ratio |\n");
  std::printf("|---|---|---|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|\n");
  for (const char* name : {"llama-1b", "llama-7b"}) {
    const protocol::ModelPreset& preset = *protocol::findPreset(name);
    // Per setting: the unconstrained cut, its one-cloud plan (every ratio is against it), and
    // each learned-code wire's own cut (their tables may need more stages); the same for every
    // link.
    std::vector<Wire> sized = wires;
    for (Wire& w : sized) {
      if (w.rankDivisor > 0) w.subspaceRank = preset.dModel / w.rankDivisor;
    }
    std::vector<Cut> plain;
    std::vector<std::map<size_t, Cut>> coded;  // [setting][a learned-code wire's index]
    std::vector<scheduler::Plan> local;
    for (const Setting& setting : settings) {
      plain.push_back(fittedCut(preset, setting, sized[0]));
      coded.emplace_back();
      for (size_t w = 0; w < sized.size(); ++w) {
        if (sized[w].learnedCode) coded.back().emplace(w, fittedCut(preset, setting, sized[w]));
      }
      const auto plan = tryPlan(plannerInput(plain.back(), setting, sized[0], 0));
      if (!plan) throw Error(std::string(name) + " " + setting.name + ": no plan fits");
      local.push_back(*plan);
    }
    for (double gbit : links) {
      for (size_t i = 0; i < settings.size(); ++i) {
        const Setting& setting = settings[i];
        const double single = local[i].chosen.stepSeconds;
        for (size_t w = 0; w < sized.size(); ++w) {
          const Wire& wire = sized[w];
          const Cut& cut = wire.learnedCode ? coded[i].at(w) : plain[i];
          const auto cross = tryPlan(plannerInput(cut, setting, wire, gbit * 1e9 / 8));
          if (!cross) throw Error(std::string(name) + " " + setting.name + ": no plan fits");
          const scheduler::PlanRow& row = cross->chosen;
          std::printf("| %s | %g Gbit/s | %s | %.0f B | %s | %d | %d | %s | %d | %s | %.2f | %.2f | %.2f | %.2f |\n",
                      name, gbit, setting.name, setting.bytesPerParameter(),
                      gigabytes(maxStashPerSample(cut, setting)).c_str(), cut.needed, stageCount(cut) * setting.copies,
                      wire.name, row.microBatches, scheduler::toString(row.schedule).c_str(), row.stepSeconds,
                      row.tiedSeconds, single, single / row.stepSeconds);
        }
      }
    }
  }
  return 0;
}
