// Profiler: what the planner's cost model is fitted to, measured by every stage at the same
// step boundary — compute times and frame bytes at a few micro-batch sizes through the job's
// codecs (every allowed codec timed for an "auto" direction), the replicas' all-reduce, and
// the links: echoing the previous stage's probes, then probing the next stage with frames of
// the job's size.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "compression/wire/encoded_tensor.h"
#include "stages/weights/weights.h"

namespace torch::optim {
class Optimizer;
}

namespace skytrain::stages {
class DataSource;
class ModelSource;
class Stage;
}  // namespace skytrain::stages

namespace skytrain::daemon {

class CodecSet;
class GradientPipeline;
class ScheduleExecutor;
class StageLinks;
struct StageContext;

// Compute measurements per size, after an untimed pass at that size: the fastest counts.
// Warm, a stage's steady-state steps run at about the fastest; the slower passes are
// interference (on a shared machine, the other daemons' own profiling and page reclaim),
// which the median let inflate the largest size up to 5x and with it the fitted slope.
constexpr int kProfileRepeats = 3;
double fastest(const std::vector<double>& times);
// A few micro-batch sizes spanning 1..batch.
std::vector<int64_t> profileSizes(int64_t batch);

// The passes profiling spends on compute. In full: every size of profileSizes, each with an
// untimed pass and kProfileRepeats timed ones (doubled where the ZB-H1 split is timed too),
// and extra rounds for a size timed under interference: about 14 steps' compute, a few
// seconds for a small model but minutes for a 100M+ one. Past kProfileBudgetSteps steps
// (measured by the first, untimed full-batch pass) and kProfileFloorSeconds, the lean
// profile: two sizes (a quarter and half the batch), one timed pass each, no extra rounds —
// under three steps' compute whatever the model's size. Its fit has the same two
// coefficients; what it gives up is the fastest-of-three guard against interference.
constexpr double kProfileBudgetSteps = 3;
constexpr double kProfileFloorSeconds = 10;
struct ProfilePasses {
  std::vector<int64_t> sizes;
  int repeats = kProfileRepeats;
  bool lean = false;  // no untimed pass per size and no extra rounds
  bool warmEachSize() const { return !lean; }
  // Full-batch passes' worth of compute these take (each pass costs its size's share).
  double cost(int64_t batch, bool split) const;
};
ProfilePasses profilePasses(int64_t batch, double fullBatchSeconds, bool split);

// What admission and the model's set-up tell the planner about a stage.
struct StageFacts {
  stages::ParameterCounts parameters;
  nlohmann::json initReport = nlohmann::json::array();  // per init_from file: loaded, from_seed
  double memoryBudgetBytes = 0;
  bool delayed = false;  // the delayed update: no zb-h1 to choose
  // A subspace model's frame (its subspace.* tensors) as a hash; empty for other models. The
  // coordinator refuses stages that derived different frames (planning.cpp).
  std::string frame;
};

class Profiler {
 public:
  Profiler(const StageContext& context, StageLinks& links, CodecSet& codecs, ScheduleExecutor& executor,
           GradientPipeline& gradients, const stages::ModelSource& source, stages::Stage& model,
           const stages::DataSource* data, torch::optim::Optimizer& optimizer, StageFacts facts);

  // A chain's stage: {"compute": ..., "link": ... (to the next stage, null on the last)}.
  nlohmann::json profile(uint64_t step);

  // The compute profile's record: the measured fits' points and what every profile adds.
  nlohmann::json computeProfile(nlohmann::json forward, nlohmann::json backward, nlohmann::json outputBytes,
                                nlohmann::json gradientBytes) const;
  // Times round trips to stage `to` over the next link: tiny probes, the job's frame `job`
  // (zeros of minBytes when smaller), then a frame three times that, then a burst of tiny
  // probes back to back; probe i carries micro-batch index(i). The link's one-way delay (the
  // tiny round trip), its bandwidth (the slope between the two large frames), its
  // per-message cost (the burst past one round trip, a message) and the round trips.
  nlohmann::json measureLink(uint64_t step, compression::EncodedTensor job, size_t minBytes, uint16_t to,
                             const std::function<uint32_t(int)>& index);

  static constexpr int kProbes = 4;       // round trips per probe size; the fastest counts
  static constexpr int kProbeSizes = 3;   // tiny, the job's frame, three times that (measureLink)
  static constexpr int kProbeBurst = 16;  // tiny probes sent back to back: the per-message cost
  static constexpr int kProbeFrames = kProbeSizes * kProbes + kProbeBurst;  // echoed a link

 private:
  nlohmann::json profileCompute();
  // The fastest of a few all-reduces of a step's gradient bytes among the copies.
  double timeAllReduce();
  nlohmann::json probeLinks(uint64_t step);
  at::Tensor randomInput(int64_t samples, at::Generator& generator) const;

  const StageContext& context_;
  StageLinks& links_;
  CodecSet& codecs_;
  ScheduleExecutor& executor_;
  GradientPipeline& gradients_;
  const stages::ModelSource& source_;
  stages::Stage& model_;
  const stages::DataSource* data_;
  torch::optim::Optimizer& optimizer_;
  StageFacts facts_;
};

}  // namespace skytrain::daemon
