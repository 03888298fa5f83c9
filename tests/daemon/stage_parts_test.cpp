// The runner's parts alone (daemon/stage/): StageLinks' frame checks and norm stash,
// CodecSet's plan and state, SnapshotReader's checks, and GradientPipeline's global-norm
// clipping across a three-stage chain over in-memory links, against the norm taken in one
// process.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <limits>
#include <thread>

#include "compression/codec_registry.h"
#include "daemon/stage/admission.h"
#include "daemon/stage/runner/codec_set.h"
#include "daemon/stage/update/gradient_pipeline.h"
#include "daemon/stage/update/loss_scaler.h"
#include "daemon/stage/runner/profiler.h"
#include "daemon/stage/state/snapshot_reader.h"
#include "daemon/stage/runner/stage_links.h"
#include "scheduler/error.h"

using namespace skytrain;
using compression::FrameDirection;

namespace {

// One direction of an in-memory link: what one end sends, the other receives.
struct Queue {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<compression::TensorFrame> frames;
};

class MemoryLink : public daemon::PeerLink {
 public:
  MemoryLink(std::shared_ptr<Queue> out, std::shared_ptr<Queue> in) : out_(std::move(out)), in_(std::move(in)) {}
  void send(const compression::TensorFrame& frame) override {
    sent_ += frame.tensor.payload.size();
    std::lock_guard<std::mutex> lock(out_->mutex);
    out_->frames.push_back(frame);
    out_->ready.notify_all();
  }
  std::optional<compression::TensorFrame> recv(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(in_->mutex);
    if (!in_->ready.wait_for(lock, timeout, [&] { return !in_->frames.empty(); })) return std::nullopt;
    auto frame = std::move(in_->frames.front());
    in_->frames.pop_front();
    return frame;
  }
  uint64_t bytesSent() const override { return sent_; }

 private:
  std::shared_ptr<Queue> out_, in_;
  uint64_t sent_ = 0;
};

// Both ends of a link.
std::pair<std::unique_ptr<MemoryLink>, std::unique_ptr<MemoryLink>> linkPair() {
  auto a = std::make_shared<Queue>(), b = std::make_shared<Queue>();
  return {std::make_unique<MemoryLink>(a, b), std::make_unique<MemoryLink>(b, a)};
}

daemon::StageContext context(int stage, int stages, double clipNorm = 0) {
  daemon::StageContext c;
  c.stage = stage;
  c.spec.peerTimeoutS = 2;
  c.spec.stages.resize(static_cast<size_t>(stages));
  c.spec.optimizer.clipNorm = clipNorm;
  return c;
}

compression::TensorFrame frame(daemon::StageLinks& links, FrameDirection direction, uint64_t step, int microBatch,
                               const at::Tensor& tensor, const std::string& codec = "none") {
  auto f = links.frameFor(direction, step, microBatch, 1);
  f.tensor = compression::builtinCodecs().make(codec)->encode(tensor);
  return f;
}

// A stage whose parameter gradients are given.
class GradientStage : public stages::Stage {
 public:
  explicit GradientStage(std::vector<at::Tensor> gradients) {
    for (auto& g : gradients) {
      auto p = torch::zeros_like(g).requires_grad_(true);
      p.mutable_grad() = g.clone();
      parameters_.push_back(p);
    }
  }
  at::Tensor forward(int, const at::Tensor& input) override { return input; }
  at::Tensor backward(int, const at::Tensor& g) override { return g; }
  at::Tensor infer(const at::Tensor& input) override { return input; }
  std::vector<at::Tensor> parameters() const override { return parameters_; }
  stages::NamedTensors namedParameters() const override { return stateDict(); }
  stages::NamedTensors stateDict() const override {
    stages::NamedTensors out;
    for (size_t i = 0; i < parameters_.size(); ++i) out.emplace_back("p" + std::to_string(i), parameters_[i]);
    return out;
  }
  size_t inFlight() const override { return 0; }

 private:
  std::vector<at::Tensor> parameters_;
};

}  // namespace

TEST_CASE("StageLinks hands over the awaited frame and refuses any other", "[stage][links]") {
  auto ctx = context(1, 3);
  daemon::StepCounters counters;
  daemon::StageLinks links(ctx, counters);
  auto [toPrevious, fromStage1] = linkPair();
  auto [toNext, unused] = linkPair();
  auto* upstream = fromStage1.get();
  links.connect(std::move(toPrevious), std::move(toNext), false);

  upstream->send(frame(links, FrameDirection::Forward, 3, 0, torch::ones({2, 4})));
  const at::Tensor got = links.receive(links.previous(), FrameDirection::Forward, 3, 0, {2, 4});
  CHECK(torch::equal(got, torch::ones({2, 4})));

  SECTION("another micro-batch is a WireError naming both") {
    upstream->send(frame(links, FrameDirection::Forward, 3, 1, torch::ones({2, 4})));
    CHECK_THROWS_WITH(links.awaitFrame(links.previous(), FrameDirection::Forward, 3, 0),
                      Catch::Contains("micro-batch 1") && Catch::Contains("micro-batch 0 was expected"));
  }
  SECTION("a shape it does not expect is refused before decoding") {
    upstream->send(frame(links, FrameDirection::Forward, 4, 0, torch::ones({3, 4})));
    CHECK_THROWS_WITH(links.receive(links.previous(), FrameDirection::Forward, 4, 0, {2, 4}),
                      Catch::Contains("carries shape [3, 4], this stage expects float32 [2, 4]"));
  }
  SECTION("nothing within peer_timeout_s is a PeerError") {
    ctx.spec.peerTimeoutS = 0.1;
    CHECK_THROWS_AS(links.awaitFrame(links.previous(), FrameDirection::Forward, 5, 0), PeerError);
  }
  SECTION("the delayed update's early norm frame waits for its turn; without the stash it is refused") {
    upstream->send(frame(links, FrameDirection::NormDown, 2, 0, torch::tensor({1.5f})));
    upstream->send(frame(links, FrameDirection::Forward, 4, 0, torch::ones({2, 4})));
    links.setStashNorms(true);
    CHECK(torch::equal(links.receive(links.previous(), FrameDirection::Forward, 4, 0, {2, 4}), torch::ones({2, 4})));
    CHECK(links.receive(links.previous(), FrameDirection::NormDown, 2, 0, {1}).item<float>() == 1.5f);
    links.setStashNorms(false);
    upstream->send(frame(links, FrameDirection::NormDown, 3, 0, torch::tensor({1.5f})));
    CHECK_THROWS_AS(links.awaitFrame(links.previous(), FrameDirection::Forward, 5, 0), WireError);
  }
  SECTION("a codec the registry refuses is the peer's malformed frame") {
    auto f = frame(links, FrameDirection::Forward, 6, 0, torch::ones({2, 4}));
    f.tensor.codec = "no-such-codec";
    upstream->send(f);
    CHECK_THROWS_AS(links.receive(links.previous(), FrameDirection::Forward, 6, 0, {2, 4}), WireError);
  }
  SECTION("pending idle work (ZB-H1's W passes) fills the wait, and only the wait") {
    int pending = 3, ran = 0;
    links.setIdleWork([&] { return pending > 0; }, [&] { --pending, ++ran; });
    upstream->send(frame(links, FrameDirection::Forward, 7, 0, torch::ones({2, 4})));
    links.awaitFrame(links.previous(), FrameDirection::Forward, 7, 0);
    CHECK(ran == 0);  // the frame was there: no W pass ran first
    auto late = frame(links, FrameDirection::Forward, 8, 0, torch::ones({2, 4}));
    std::thread sender([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      upstream->send(late);
    });
    links.awaitFrame(links.previous(), FrameDirection::Forward, 8, 0);
    sender.join();
    CHECK(ran == 3);
  }
}

TEST_CASE("CodecSet: warm-up codecs first, a plan replaces only auto directions, state round-trips",
          "[stage][codecs]") {
  protocol::CompressionSpec spec;
  spec.forward = "auto";
  spec.backward = "ef(int8)";
  spec.warmup = "fp16";
  spec.warmupSteps = 2;
  daemon::CodecSet codecs(spec);
  CHECK(codecs.forStep(1).forward->spec() == "fp16");
  CHECK(codecs.forStep(2).forward->spec() == "none");
  codecs.applyPlan("bf16", "int8");
  CHECK(codecs.forwardSpec() == "bf16");
  CHECK(codecs.backwardSpec() == "ef(int8)");  // not "auto": the spec's stands
  CHECK_THROWS_AS(codecs.applyPlan("no-such-codec", ""), Error);
  CHECK(codecs.forwardSpec() == "bf16");

  codecs.forStep(5).backward->encode(torch::randn({4, 8}));  // error feedback keeps a residual
  std::vector<std::pair<std::string, at::Tensor>> saved;
  codecs.saveState(saved);
  REQUIRE_FALSE(saved.empty());
  CHECK(saved.front().first.rfind("codec/steady.backward/", 0) == 0);
  daemon::CodecSet restored(spec);
  restored.applyPlan("bf16", "");
  daemon::SnapshotReader reader(saved, "checkpoint of step 5 stage 0");
  restored.loadState(reader);
  reader.checkAllTaken();
  std::vector<std::pair<std::string, at::Tensor>> again;
  restored.saveState(again);
  REQUIRE(again.size() == saved.size());
  for (size_t i = 0; i < saved.size(); ++i) CHECK(torch::equal(again[i].second, saved[i].second));
}

TEST_CASE("SnapshotReader checks each tensor's shape and dtype and that none is left over", "[stage][snapshot]") {
  daemon::SnapshotReader reader({{"param/w", torch::zeros({2, 3})}, {"extra", torch::zeros({1})}}, "checkpoint X");
  CHECK_THROWS_WITH(reader.take("param/w", torch::zeros({3, 2})), Catch::Contains("checkpoint X") &&
                                                                      Catch::Contains("\"param/w\" has shape [2, 3]"));
  CHECK(reader.take("param/w", torch::zeros({2, 3})).has_value());
  CHECK_FALSE(reader.take("param/missing", torch::zeros({1})).has_value());
  CHECK_THROWS_WITH(reader.checkAllTaken(), Catch::Contains("unexpected tensor \"extra\""));
}

TEST_CASE("GradientPipeline clips three stages by the norm one process would take", "[stage][gradients]") {
  // Stage s holds gradients whose norms are known; the global norm is over all of them.
  const std::vector<std::vector<at::Tensor>> grads = {
      {torch::full({3}, 2.0f)}, {torch::full({2, 2}, 1.0f), torch::full({1}, 4.0f)}, {torch::full({5}, 3.0f)}};
  std::vector<at::Tensor> all;
  for (const auto& stage : grads) {
    for (const auto& g : stage) all.push_back(g.flatten());
  }
  const double total = torch::cat(all).norm().item<double>();
  const double clip = 1.0;
  auto [up01, down01] = linkPair();  // stage 0's link to 1, stage 1's link to 0
  auto [up12, down12] = linkPair();
  std::unique_ptr<daemon::PeerLink> previous[3] = {nullptr, std::move(down01), std::move(down12)};
  std::unique_ptr<daemon::PeerLink> next[3] = {std::move(up01), std::move(up12), nullptr};
  std::vector<std::unique_ptr<GradientStage>> models;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(3);
  for (int s = 0; s < 3; ++s) models.push_back(std::make_unique<GradientStage>(grads[s]));
  for (int s = 0; s < 3; ++s) {
    threads.emplace_back([&, s] {
      try {
        auto ctx = context(s, 3, clip);
        daemon::StepCounters counters;
        daemon::StageLinks links(ctx, counters);
        links.connect(std::move(previous[s]), std::move(next[s]), false);
        daemon::GradientPipeline pipeline(ctx, counters, links, false);
        if (!pipeline.finish(0, *models[s])) errors[s] = "skipped";
      } catch (const std::exception& e) {
        errors[s] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) CHECK(e.empty());
  const double scale = clip / (total + 1e-6);
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < grads[s].size(); ++i) {
      CHECK(torch::allclose(models[s]->parameters()[i].grad(), grads[s][i] * scale));
    }
  }
}

TEST_CASE("GradientPipeline fails a non-finite gradient naming it, or skips when told", "[stage][gradients]") {
  auto ctx = context(0, 1);
  daemon::StepCounters counters;
  daemon::StageLinks links(ctx, counters);
  links.connect(nullptr, nullptr, false);
  GradientStage model({torch::tensor({1.0f, std::nanf("")})});
  daemon::GradientPipeline failing(ctx, counters, links, false);
  CHECK_THROWS_WITH(failing.finish(4, model), Catch::StartsWith("non-finite: the gradient of p0 at step 5"));
  ctx.spec.optimizer.onNonfinite = "skip";
  daemon::GradientPipeline skipping(ctx, counters, links, false);
  CHECK_FALSE(skipping.finish(4, model));
}

TEST_CASE("LossScaler: halves on overflow down to 1, doubles after its interval, restores only what it could have made",
          "[stage][gradients]") {
  protocol::LossScaleSpec spec;
  spec.dynamic = true;
  spec.init = 8;
  spec.growthInterval = 2;
  daemon::LossScaler scaler(spec);
  CHECK(scaler.scale() == 8);
  CHECK(scaler.overflowed());
  CHECK(scaler.scale() == 4);
  scaler.stepped();
  CHECK(scaler.scale() == 4);
  scaler.stepped();
  CHECK(scaler.scale() == 8);  // two good steps in a row
  scaler.stepped();
  CHECK(scaler.overflowed());  // an overflow restarts the run of good steps
  scaler.stepped();
  CHECK(scaler.scale() == 4);
  CHECK(scaler.overflowed());
  CHECK(scaler.overflowed());
  CHECK(scaler.scale() == 1);
  CHECK_FALSE(scaler.overflowed());  // at 1 the overflow is the model's: on_nonfinite decides
  CHECK(daemon::describeScale(65536) == "2^16");

  // Unscaling divides exactly, in place.
  const at::Tensor g = torch::tensor({3.0f, -0.75f});
  daemon::LossScaler at8(spec);
  at8.unscale({{"w", g}});
  CHECK(torch::equal(g, torch::tensor({0.375f, -0.09375f})));

  std::vector<std::pair<std::string, at::Tensor>> saved;
  scaler.stepped();
  scaler.saveState(saved);
  REQUIRE(saved.size() == 2);
  daemon::LossScaler restored(spec);
  daemon::SnapshotReader reader(saved, "checkpoint X");
  restored.restoreState(reader);
  CHECK(restored.scale() == 1);
  restored.stepped();
  CHECK(restored.scale() == 2);  // the run of good steps came back too
  // A crafted checkpoint: a scale that is no power of two, or out of range, or a run too long.
  for (const auto& [scale, good] : std::vector<std::pair<double, int64_t>>{
           {3.0, 0}, {0.5, 0}, {std::nan(""), 0}, {std::numeric_limits<double>::infinity(), 0}, {4.0, 2}, {4.0, -1}}) {
    CAPTURE(scale, good);
    daemon::SnapshotReader crafted({{"loss_scale/scale", torch::tensor(scale, torch::kFloat)},
                                    {"loss_scale/good_steps", torch::tensor(good, torch::kLong)}},
                                   "checkpoint Y");
    CHECK_THROWS_WITH(daemon::LossScaler(spec).restoreState(crafted), Catch::Contains("checkpoint Y"));
  }
  daemon::SnapshotReader missing({}, "checkpoint Z");
  CHECK_THROWS_WITH(daemon::LossScaler(spec).restoreState(missing), Catch::Contains("loss scale is missing"));
}

TEST_CASE("Profiler's passes: full for a small model, under three steps' compute for a large one", "[stage][profiler]") {
  using skytrain::daemon::profilePasses;
  SECTION("a demo-sized stage (0.2 s a step) keeps every size and the fastest of three") {
    const auto passes = profilePasses(16, 0.2, /*split=*/true);
    CHECK_FALSE(passes.lean);
    CHECK(passes.sizes == std::vector<int64_t>{1, 4, 8, 16});
    CHECK(passes.repeats == skytrain::daemon::kProfileRepeats);
    CHECK(passes.cost(16, true) * 0.2 <= skytrain::daemon::kProfileFloorSeconds);
  }
  SECTION("a 100M+ stage (5 s a step): the lean profile, bounded whatever the batch") {
    for (int64_t batch : {4, 8, 16, 64, 512}) {
      for (bool split : {false, true}) {
        INFO("batch " << batch << " split " << split);
        const auto full = profilePasses(batch, 1e-6, split);
        CHECK(full.cost(batch, split) > skytrain::daemon::kProfileBudgetSteps);  // what it was: ~7-14 steps
        const auto passes = profilePasses(batch, 5.0, split);
        CHECK(passes.lean);
        CHECK(passes.sizes.size() == 2);
        CHECK(passes.repeats == 1);
        CHECK_FALSE(passes.warmEachSize());
        CHECK(passes.cost(batch, split) <= skytrain::daemon::kProfileBudgetSteps);
      }
    }
  }
  SECTION("a batch of 1 still profiles one size") {
    const auto passes = profilePasses(1, 30.0, true);
    CHECK(passes.sizes == std::vector<int64_t>{1});
    CHECK(passes.cost(1, true) <= skytrain::daemon::kProfileBudgetSteps);
  }
}

TEST_CASE("admission: a subspace model's frozen frame counts as weights only, with no gradient or AdamW state") {
  const char* text = R"({"steps": 2, "batch_size": 2, "precision": "bf16",
    "model": {"d_model": 32, "heads": 4, "layers": 4, "d_ff": 64, "seq_len": 16, "vocab_size": 1000, SUBSPACE},
    "data": {"files": ["/x"]},
    "stages": [{"daemon": "tcp://a:1", "layers": [0, 2]}, {"daemon": "tcp://b:1", "layers": [2, 4]}]})";
  auto spec = [&](const std::string& subspace) {
    std::string s = text;
    s.replace(s.find("SUBSPACE"), 8, subspace);
    return protocol::parseJobSpec(s);
  };
  const protocol::JobSpec constrained = spec(R"("subspace": {"rank": 4})");
  const daemon::MemoryEstimate m = daemon::estimateStageMemory(constrained, 1, 1e12);
  const double frozen = 4.0 * (1000 * 32 + 16 * 32 + 32 * 4);
  REQUIRE(m.weightBytes > frozen);
  CHECK(m.optimizerBytes == Approx(3 * (m.weightBytes - frozen)));
  // The same model unconstrained: every weight trains.
  const daemon::MemoryEstimate plain = daemon::estimateStageMemory(spec(R"("dropout": 0.0)"), 1, 1e12);
  CHECK(plain.optimizerBytes == Approx(3 * plain.weightBytes));
}
