#include "daemon/stage/runner/profiler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>

#include "compression/codec_registry.h"
#include "compression/kernels/prediction_kernels.h"
#include "compression/side_tokens.h"
#include "daemon/net/replica_group.h"
#include "daemon/ops/timing.h"
#include "daemon/protocol/failures.h"
#include "daemon/stage/runner/codec_set.h"
#include "daemon/stage/update/gradient_checks.h"
#include "daemon/stage/update/gradient_pipeline.h"
#include "daemon/stage/runner/schedule_executor.h"
#include "daemon/stage/runner/stage_links.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

using compression::FrameDirection;
using Json = nlohmann::json;

constexpr size_t kMinProbeBytes = 1 << 20;  // smaller frames time the latency, not the bandwidth
constexpr int kExtraRounds = 2;
constexpr double kSuspectFactor = 1.5;

}  // namespace

double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

std::vector<int64_t> profileSizes(int64_t batch) {
  std::set<int64_t> sizes{1, std::max<int64_t>(1, batch / 4), std::max<int64_t>(1, batch / 2), batch};
  return {sizes.begin(), sizes.end()};
}

double ProfilePasses::cost(int64_t batch, bool split) const {
  double samples = 0;
  for (int64_t b : sizes) samples += static_cast<double>(b);
  return samples / static_cast<double>(batch) * ((warmEachSize() ? 1 : 0) + repeats * (split ? 2 : 1));
}

ProfilePasses profilePasses(int64_t batch, double fullBatchSeconds, bool split) {
  ProfilePasses full;
  full.sizes = profileSizes(batch);
  const double seconds = full.cost(batch, split) * fullBatchSeconds;
  if (seconds <= kProfileFloorSeconds || seconds <= kProfileBudgetSteps * fullBatchSeconds) return full;
  ProfilePasses lean;
  const std::set<int64_t> sizes{std::max<int64_t>(1, batch / 4), std::max<int64_t>(1, batch / 2)};
  lean.sizes.assign(sizes.begin(), sizes.end());
  lean.repeats = 1;
  lean.lean = true;
  return lean;
}

Profiler::Profiler(const StageContext& context, StageLinks& links, CodecSet& codecs, ScheduleExecutor& executor,
                   GradientPipeline& gradients, const stages::ModelSource& source, stages::Stage& model,
                   const stages::DataSource* data, torch::optim::Optimizer& optimizer, StageFacts facts)
    : context_(context),
      links_(links),
      codecs_(codecs),
      executor_(executor),
      gradients_(gradients),
      source_(source),
      model_(model),
      data_(data),
      optimizer_(optimizer),
      facts_(std::move(facts)) {}

at::Tensor Profiler::randomInput(int64_t samples, at::Generator& generator) const {
  const auto shape = source_.inputShape(context_.stage, samples);
  // A stage that reads its targets as input too (a decoder) or has a loss of its own gets real ones.
  if ((context_.isLast() || model_.hasOwnLoss()) && data_) {
    model_.setTargets(data_->trainBatch(0, 0, static_cast<int>(samples)).targets);
  }
  // Token ids its data can hold: those of the stage's tokenizer, within vocab_size.
  int64_t ids = context_.spec.model.vocabSize;
  if (data_) ids = std::min<int64_t>(ids, data_->tokenizer().vocabSize());
  auto tokens = [&](std::vector<int64_t> sizes) {
    return torch::randint(0, std::max<int64_t>(1, ids), sizes, generator, torch::kLong).to(context_.device);
  };
  if (context_.isFirst()) return tokens(shape);
  // A stage that rebuilds part of its input from the token ids (a subspace model) gets some.
  if (context_.spec.model.subspace.enabled()) model_.setTokens(tokens({shape[0], shape[1]}));
  return torch::randn(shape, generator).to(context_.device);
}

Json Profiler::profile(uint64_t step) {
  Json compute;
  try {
    compute = profileCompute();
  } catch (const c10::Error& e) {
    // The model's own forward or backward failed on inputs of the spec's shapes (token ids
    // below vocab_size, the declared input shape): a model that does not fit its spec, which
    // a restart would meet again.
    throw Error(std::string(protocol::kBadModel) + "stage " + std::to_string(context_.stage) +
                " failed on the job's shapes while profiling: " + e.what_without_backtrace());
  }
  model_.takeSenderLosses();  // of random inputs: not the first step's
  if (gradients_.replicas()) compute["allreduce_s"] = timeAllReduce();
  compute["replicas"] = protocol::replicaCount(context_.spec);
  // The tied matrices this stage holds first: what their gradient frames carry down to the
  // second holder and back every step (GradientPipeline::sumTied), for the planner.
  compute["tied"] = Json::array();
  const double bytesPerElement = GradientPipeline::tiedCodecSpec(context_.spec) == "none" ? 4.0 : 2.0;
  for (const auto& pair : source_.tied()) {
    if (pair.firstStage != context_.stage) continue;
    for (const auto& [name, parameter] : model_.namedParameters()) {
      if (name == pair.firstName) {
        compute["tied"].push_back({{"bytes", bytesPerElement * parameter.numel()}, {"to_stage", pair.secondStage}});
      }
    }
  }
  return {{"compute", std::move(compute)}, {"link", probeLinks(step)}};
}

double Profiler::timeAllReduce() {
  // Zeros shaped as the trainable parameters: the bytes of a step's gradient all-reduce.
  std::vector<at::Tensor> buffers;
  for (const auto& p : model_.parameters()) buffers.push_back(torch::zeros_like(p));
  constexpr int kRounds = 3;  // the fastest counts, as for the link probes
  double best = 1e30;
  for (int i = 0; i < kRounds; ++i) {
    const auto start = Clock::now();
    gradients_.replicas()->average(buffers);
    best = std::min(best, secondsSince(start));
  }
  return best;
}

Json Profiler::profileCompute() {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(0x9f0f11e);
  // Fresh codecs: profiling must not touch the training streams' error-feedback state.
  // An "auto" direction: the fits leave its codec out, and every allowed codec is timed
  // on this stage's own tensors for the planner to choose (compute["codecs"]).
  const bool autoForward = context_.spec.compression.forward == "auto" && !context_.isLast();
  const bool autoBackward = context_.spec.compression.backward == "auto" && !context_.isFirst();
  const auto& registry = compression::builtinCodecs();
  auto forwardCodec = registry.make(context_.spec.compression.forward == "auto" ? "none" : context_.spec.compression.forward);
  // The receiving end's own codec: a "+pred" codec keeps a stream's state at each end.
  auto forwardReceiver = registry.make(forwardCodec->spec());
  auto backwardCodec = registry.make(context_.spec.compression.backward == "auto" ? "none" : context_.spec.compression.backward);
  std::vector<std::pair<std::string, std::unique_ptr<compression::Codec>>> forwardOptions, backwardOptions;
  if (autoForward) {
    for (const auto& name : context_.spec.compression.allowedFor(true)) forwardOptions.emplace_back(name, registry.make(name));
  }
  if (autoBackward) {
    for (const auto& name : context_.spec.compression.allowedFor(false)) backwardOptions.emplace_back(name, registry.make(name));
  }
  Json options = {{"forward", Json::object()}, {"backward", Json::object()}};
  // Encode plus decode of `tensor` by each option at micro-batch size b: the fastest of three.
  auto timeOptions = [&](std::vector<std::pair<std::string, std::unique_ptr<compression::Codec>>>& all,
                         const at::Tensor& tensor, int64_t b, Json& into) {
    for (auto& [name, codec] : all) {
      double best = 1e30;
      size_t bytes = 0;
      for (int i = 0; i < 3; ++i) {
        const auto start = Clock::now();
        const auto encoded = codec->encode(tensor);
        codec->decode(encoded);
        best = std::min(best, secondsSince(start));
        bytes = compression::frameBytes(encoded);
      }
      into[name]["seconds"].push_back({b, best});
      into[name]["bytes"].push_back({b, bytes});
    }
  };
  Json forward = Json::array(), backward = Json::array(), outputBytes = Json::array(), gradientBytes = Json::array();
  Json weight = Json::array();
  constexpr int kProfileMicroBatch = -1;  // never a real micro-batch index
  // A GPU runs kernels after their launch returns: the clocks read once the device is idle.
  const auto settle = [this] {
    if (context_.device.is_cuda()) torch::cuda::synchronize(context_.device.index());
  };
  const auto settledNow = [&] {
    settle();
    return Clock::now();
  };
  const auto settledSince = [&](Clock::time_point start) {
    settle();
    return secondsSince(start);
  };
  // Passes alternate: whole backwards (forward_s, backward_s), then split ones (ZB-H1) whose
  // W pass alone is timed (weight_s). Only where the planner may choose zb-h1; 0 elsewhere and
  // on a stage that cannot split.
  const bool mayChooseSplit = (context_.spec.schedule == "auto" || context_.spec.schedule == "zb-h1") && !facts_.delayed;
  const bool split = mayChooseSplit && model_.setSplitBackward(true);
  const auto profileStart = Clock::now();
  {  // warm-up: the first pass pays for allocations and lazy initialisation; it also says
     // what a step's compute costs, which bounds the passes that follow
    const at::Tensor output = model_.forward(kProfileMicroBatch, randomInput(context_.spec.batchSize, generator));
    model_.backward(kProfileMicroBatch, torch::zeros(output.sizes()));
    model_.backwardWeights(kProfileMicroBatch);
  }
  const ProfilePasses passes = profilePasses(context_.spec.batchSize, secondsSince(profileStart), split);
  const int repeats = passes.repeats;
  for (int64_t b : passes.sizes) {
    std::vector<double> forwardTimes, backwardTimes, weightTimes;
    size_t outBytes = 0, gradBytes = 0;
    auto runPass = [&](int pass) {
      const bool warm = pass < 0;  // untimed: this size's first pass pays for its allocations
      const bool splitPass = pass % 2 == 1;
      if (splitPass && !split) return;
      model_.setSplitBackward(splitPass);
      const bool last = pass == 2 * repeats - 2;  // the last whole pass
      const at::Tensor input = randomInput(b, generator);
      auto start = settledNow();
      at::Tensor output = model_.forward(kProfileMicroBatch, input);
      at::Tensor grad;
      double forwardSeconds = 0;
      if (context_.isLast()) {
        at::Tensor logits = output.requires_grad_(true);
        const at::Tensor targets = torch::randint(0, logits.size(-1), {logits.numel() / logits.size(-1)}, generator,
                                                  torch::kLong).to(logits.device());
        torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets).backward();
        grad = logits.grad();
      } else {
        const double modelSeconds = settledSince(start);
        int cycle = 1;  // messages timed, per message
        if (auto* conditioned = compression::tokenConditioned(*forwardCodec)) {  // "+pred": a first stage's
          const at::Tensor ids = context_.isFirst() ? input : torch::zeros({b, context_.spec.model.seqLen}, torch::kLong);
          conditioned->setTokens(ids);
          compression::tokenConditioned(*forwardReceiver)->setTokens(ids);
          // Its tables learn from one message in kLearnEvery, at both ends: a whole cycle, so
          // the fastest pass still holds one learning message.
          cycle = static_cast<int>(compression::prediction::kLearnEvery);
        }
        const auto codecStart = Clock::now();
        for (int i = 0; i < cycle; ++i) {
          const auto encoded = forwardCodec->encode(output);
          forwardReceiver->decode(encoded);  // the receiver's work, counted on this side
          outBytes = compression::frameBytes(encoded);
        }
        forwardSeconds = modelSeconds + (autoForward ? 0.0 : secondsSince(codecStart) / cycle);  // "auto": the option's
        if (autoForward && last) timeOptions(forwardOptions, output, b, options["forward"]);
        grad = torch::randn(output.sizes(), generator);
      }
      if (!splitPass && !warm) forwardTimes.push_back(context_.isLast() ? settledSince(start) : forwardSeconds);
      start = settledNow();
      const at::Tensor gradInput = model_.backward(kProfileMicroBatch, grad);
      double codecSeconds = 0;
      if (!context_.isFirst()) {
        const auto codecStart = Clock::now();
        const auto encoded = backwardCodec->encode(gradInput);
        backwardCodec->decode(encoded);
        gradBytes = compression::frameBytes(encoded);
        codecSeconds = secondsSince(codecStart);
      }
      if (splitPass) {
        start = settledNow();
        model_.backwardWeights(kProfileMicroBatch);
        weightTimes.push_back(settledSince(start));
        return;
      }
      if (warm) {
        model_.backwardWeights(kProfileMicroBatch);  // nothing pending unless split; a no-op then
        return;
      }
      backwardTimes.push_back(settledSince(start) - (autoBackward ? codecSeconds : 0.0));  // "auto": the option's
      if (autoBackward && last) timeOptions(backwardOptions, gradInput, b, options["backward"]);
    };
    for (int pass = passes.warmEachSize() ? -1 : 0; pass < 2 * repeats; ++pass) runPass(pass);
    // A size much slower than the line through the two sizes below it was most likely timed
    // under interference throughout: it gets more passes, up to kExtraRounds more rounds.
    auto suspect = [&](const Json& points, const std::vector<double>& times) {
      const size_t n = points.size();
      if (n < 2 || times.empty()) return false;
      const double b0 = points[n - 2][0].get<double>(), t0 = points[n - 2][1].get<double>();
      const double b1 = points[n - 1][0].get<double>(), t1 = points[n - 1][1].get<double>();
      const double line = t1 + (t1 - t0) / std::max(1.0, b1 - b0) * (static_cast<double>(b) - b1);
      return fastest(times) > kSuspectFactor * std::max(line, t1);
    };
    for (int round = 0; !passes.lean && round < kExtraRounds &&
                        (suspect(forward, forwardTimes) || suspect(backward, backwardTimes));
         ++round) {
      for (int pass = 0; pass < 2 * repeats; ++pass) runPass(2 * repeats + pass);  // past `last`: no codec timing
    }
    forward.push_back({b, fastest(forwardTimes)});
    backward.push_back({b, fastest(backwardTimes)});
    weight.push_back({b, weightTimes.empty() ? 0.0 : fastest(weightTimes)});
    outputBytes.push_back({b, outBytes});
    gradientBytes.push_back({b, gradBytes});
  }
  model_.setSplitBackward(executor_.schedule().kind == scheduler::ScheduleKind::ZeroBubbleH1);
  zeroGradients(model_.parameters());  // profiling's gradients must not reach the first step
  Json profile = computeProfile(std::move(forward), std::move(backward), std::move(outputBytes), std::move(gradientBytes));
  profile["weight_s"] = std::move(weight);
  profile["profile_passes"] = passes.lean ? "lean" : "full";
  profile["profile_s"] = secondsSince(profileStart);
  if (autoForward || autoBackward) profile["codecs"] = std::move(options);
  return profile;
}

Json Profiler::computeProfile(Json forward, Json backward, Json outputBytes, Json gradientBytes) const {
  return {{"forward_s", std::move(forward)},
          {"backward_s", std::move(backward)},
          {"output_bytes", std::move(outputBytes)},
          {"gradient_bytes", std::move(gradientBytes)},
          {"stash_bytes_per_sample", source_.stashBytesPerSample(context_.stage)},
          {"parameters", {{"trainable", facts_.parameters.trainable}, {"frozen", facts_.parameters.frozen}}},
          {"init_from", facts_.initReport},
          {"frame", facts_.frame},
          {"memory_budget_bytes", facts_.memoryBudgetBytes}};
}

Json Profiler::probeLinks(uint64_t step) {
  auto frame = [&](FrameDirection direction, int index, uint16_t to, const at::Tensor& t) {
    compression::TensorFrame f = links_.frameFor(direction, step, index, to);
    f.tensor = links_.decoderFor("none").encode(t);
    return f;
  };
  const at::Tensor tiny = torch::zeros({1});
  if (!context_.isFirst()) {  // echo the previous stage's probes with a tiny reply
    for (int i = 0; i < kProbeFrames; ++i) {
      links_.awaitFrame(links_.previous(), FrameDirection::Probe, step, i);
      links_.previous().send(frame(FrameDirection::ProbeReply, i, static_cast<uint16_t>(context_.stage - 1), tiny));
    }
  }
  if (context_.isLast()) return nullptr;
  // A real frame of the job's size: the activation of a full batch through the job's codec.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(0x11ec);
  const at::Tensor input = randomInput(context_.spec.batchSize, generator);
  const at::Tensor activation = model_.infer(input);
  auto codec = compression::builtinCodecs().make(codecs_.forwardSpec());
  if (auto* conditioned = compression::tokenConditioned(*codec)) conditioned->setTokens(input);  // "+pred": a first stage's
  return measureLink(step, codec->encode(activation),
                     kMinProbeBytes, static_cast<uint16_t>(context_.stage + 1), [](int i) { return static_cast<uint32_t>(i); });
}

Json Profiler::measureLink(uint64_t step, compression::EncodedTensor job, size_t minBytes, uint16_t to,
                                 const std::function<uint32_t(int)>& index) {
  auto probe = [&](int i, const compression::EncodedTensor& tensor) {
    compression::TensorFrame f = links_.frameFor(FrameDirection::Probe, step, static_cast<int>(index(i)), to);
    f.tensor = tensor;
    return f;
  };
  const compression::EncodedTensor tiny = links_.decoderFor("none").encode(torch::zeros({1}));
  const double jobBytes = static_cast<double>(compression::frameBytes(job));
  if (compression::frameBytes(job) < minBytes) job = links_.decoderFor("none").encode(torch::zeros({static_cast<int64_t>(minBytes / 4)}));
  // Three sizes: tiny (the round trip), the job's frame, and one three times larger. The
  // bandwidth is the slope between the two large ones, so a link's burst allowance (a token
  // bucket lets its first bytes through at line rate) counts in both and cancels out.
  const int64_t bigFloats = static_cast<int64_t>(3 * (job.payload.size() / 4 + 1));
  const compression::EncodedTensor big = links_.decoderFor("none").encode(torch::zeros({bigFloats}));
  const compression::EncodedTensor* sizes[kProbeSizes] = {&tiny, &job, &big};
  double rtt[kProbeSizes] = {1e30, 1e30, 1e30};
  for (int i = 0; i < kProbeSizes * kProbes; ++i) {
    const int size = i / kProbes;
    const auto start = Clock::now();
    links_.next().send(probe(i, *sizes[size]));
    links_.awaitFrame(links_.next(), FrameDirection::ProbeReply, step, static_cast<int>(index(i)));
    rtt[size] = std::min(rtt[size], secondsSince(start));
  }
  // A burst of tiny probes sent back to back: their replies come back paced by the slowest
  // serial step on the path (ZeroMQ, the receiving threads, a relay), so the time past one
  // round trip over the burst's length is what each message costs the link beyond its bytes.
  const int burstStart = kProbeSizes * kProbes;
  const auto burstBegin = Clock::now();
  for (int i = burstStart; i < burstStart + kProbeBurst; ++i) links_.next().send(probe(i, tiny));
  for (int i = burstStart; i < burstStart + kProbeBurst; ++i) {
    links_.awaitFrame(links_.next(), FrameDirection::ProbeReply, step, static_cast<int>(index(i)));
  }
  const double burst = secondsSince(burstBegin);
  const double overhead = std::max(0.0, (burst - rtt[0]) / (kProbeBurst - 1));
  // The tiny probe's round trip is twice the one-way delay (per-message overhead folded in).
  const double midBytes = static_cast<double>(compression::frameBytes(job));
  const double bigBytes = static_cast<double>(compression::frameBytes(big));
  const double transfer = std::max(1e-7, rtt[2] - rtt[1]);
  return {{"bandwidth_bytes_per_s", (bigBytes - midBytes) / transfer},
          {"delay_s", rtt[0] / 2},
          {"overhead_s", overhead},
          {"probe_bytes", bigBytes},
          {"job_frame_bytes", jobBytes},
          {"rtt_small_s", rtt[0]},
          {"rtt_job_s", rtt[1]},
          {"rtt_big_s", rtt[2]},
          {"burst_s", burst}};
}

}  // namespace skytrain::daemon
