// A frame from the assigned neighbour is still checked: its shape and dtype must be what the
// receiving stage expects for that (step, micro-batch), before any decoder allocates; a codec
// that needs token IDs ("+pred") only where the stage holds them, and its payload as any.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <deque>

#include "compression/codec_registry.h"
#include "daemon/stage/runner/pipeline_runner.h"
#include "scheduler/error.h"

using namespace skytrain;
using compression::FrameDirection;

namespace {

// Delivers the frames it is given, in order; drops what is sent.
class ScriptedLink : public daemon::PeerLink {
 public:
  std::deque<compression::TensorFrame> inbound;
  void send(const compression::TensorFrame&) override {}
  std::optional<compression::TensorFrame> recv(std::chrono::milliseconds) override {
    if (inbound.empty()) return std::nullopt;
    auto frame = std::move(inbound.front());
    inbound.pop_front();
    return frame;
  }
  uint64_t bytesSent() const override { return 0; }
};

protocol::JobSpec middleStageSpec() {
  return protocol::parseJobSpec(R"({"steps": 2, "batch_size": 2, "micro_batches": 1, "schedule": "1f1b",
    "peer_timeout_s": 1, "model": {"d_model": 16, "heads": 2, "layers": 3, "d_ff": 32, "seq_len": 8},
    "data": {"files": ["/nonexistent"]},
    "stages": [{"daemon": "tcp://a:1", "layers": [0, 1]}, {"daemon": "tcp://b:1", "layers": [1, 2]},
               {"daemon": "tcp://c:1", "layers": [2, 3]}]})");
}

// Stage 1 of 2: it draws the micro-batch (for its targets), so it holds the token IDs.
protocol::JobSpec lastStageSpec() {
  return protocol::parseJobSpec(R"({"steps": 2, "batch_size": 2, "micro_batches": 1, "schedule": "1f1b",
    "peer_timeout_s": 1, "model": {"d_model": 64, "heads": 2, "layers": 2, "d_ff": 32, "seq_len": 8},
    "data": {"files": [")" SKYTRAIN_TEST_CORPUS R"("]},
    "stages": [{"daemon": "tcp://a:1", "layers": [0, 1]}, {"daemon": "tcp://b:1", "layers": [1, 2]}]})");
}

std::string runWith(compression::TensorFrame frame, const protocol::JobSpec& spec = middleStageSpec()) {
  daemon::PipelineRunner runner(spec, 1, 7, 1e9);
  auto previous = std::make_unique<ScriptedLink>();
  previous->inbound.push_back(std::move(frame));
  const bool last = spec.stages.size() == 2;
  runner.connect(std::move(previous), last ? nullptr : std::make_unique<ScriptedLink>());
  try {
    runner.runStep(0);
  } catch (const WireError& e) {
    return e.what();
  }
  return "";
}

compression::TensorFrame forward(std::vector<int64_t> shape, std::string payload) {
  compression::TensorFrame frame;
  frame.job = 7;
  frame.stage = 1;
  frame.direction = FrameDirection::Forward;
  frame.tensor.codec = "none";
  frame.tensor.shape = std::move(shape);
  frame.tensor.payload = std::move(payload);
  return frame;
}

}  // namespace

TEST_CASE("a frame claiming a huge shape is refused before decoding") {
  const std::string error = runWith(forward({1 << 20, 1 << 20, 1024}, "tiny"));
  CHECK(error.find("carries shape [1048576, 1048576, 1024], this stage expects float32 [2, 8, 16]") != std::string::npos);
}

TEST_CASE("a frame of the wrong dtype or rank is refused") {
  auto frame = forward({2, 8, 16}, std::string(2 * 8 * 16 * 4, '\0'));
  frame.tensor.dtype = compression::WireDType::Int64;
  CHECK(runWith(frame).find("expects float32 [2, 8, 16]") != std::string::npos);
  CHECK(runWith(forward({2, 8}, std::string(2 * 8 * 4, '\0'))).find("carries shape [2, 8]") != std::string::npos);
}

TEST_CASE("a frame of the expected shape is decoded and used") {
  auto encoded = compression::builtinCodecs().make("none")->encode(torch::zeros({2, 8, 16}));
  auto frame = forward(encoded.shape, encoded.payload);
  // The step then waits for the backward frame, which never comes: a time-out, not a shape error.
  daemon::PipelineRunner runner(middleStageSpec(), 1, 7, 1e9);
  auto previous = std::make_unique<ScriptedLink>();
  previous->inbound.push_back(frame);
  runner.connect(std::move(previous), std::make_unique<ScriptedLink>());
  CHECK_THROWS_WITH(runner.runStep(0), Catch::Contains("no backward frame of step 1"));
}

TEST_CASE("a \"+pred\" frame at a stage without the token IDs is refused with the reason") {
  // A middle stage draws no micro-batch: nothing to predict from, whatever the payload.
  auto frame = forward({2, 8, 16}, std::string(2 * 8 * 16 / 2, '\0'));
  frame.tensor.codec = "q13+pred";
  CHECK(runWith(frame).find("uses codec \"q13+pred\", which needs token IDs this stage does not hold") !=
        std::string::npos);
}

TEST_CASE("a crafted \"+pred\" frame at the last stage is refused as any crafted payload") {
  auto frame = forward({2, 8, 64}, std::string(2 * 8 * 64 / 2 - 1, '\0'));  // one byte short of q13's size
  frame.tensor.codec = "q13+pred";
  CHECK(runWith(frame, lastStageSpec()).find("payload") != std::string::npos);
  // Specs the registry refuses: the peer named them, so the frame is malformed.
  frame.tensor.codec = "q13+pred+pred";
  CHECK(runWith(frame, lastStageSpec()).find("frame names codec \"q13+pred+pred\"") != std::string::npos);
  frame.tensor.codec = "ef(q13+pred)";
  CHECK(runWith(frame, lastStageSpec()).find("cannot wrap") != std::string::npos);
}

TEST_CASE("a fan-in consumer refuses token IDs outside the vocabulary and flags other than 0 or 1") {
  // Two producers feed the consumer (stage 2); producer 0 sends micro-batch 0 of step 0.
  const auto spec = protocol::parseJobSpec(R"({"steps": 2, "batch_size": 2, "micro_batches": 1, "schedule": "1f1b",
    "peer_timeout_s": 1, "model": {"kind": "electra", "vocab_size": 257, "d_model": 16, "heads": 2, "layers": 1,
      "d_ff": 32, "seq_len": 8, "generator": {"d_model": 16, "heads": 2, "layers": 1, "d_ff": 32}},
    "data": {"files": ["/nonexistent"]},
    "stages": [{"daemon": "tcp://a:1"}, {"daemon": "tcp://c:1"}, {"daemon": "tcp://b:1"}]})");
  auto run = [&](const at::Tensor& ids, const at::Tensor& flags) -> std::string {
    daemon::PipelineRunner runner(spec, 2, 7, 1e9);
    auto queue = std::make_unique<ScriptedLink>();
    compression::TensorFrame frame;
    frame.job = 7;
    frame.stage = 2;
    frame.direction = FrameDirection::Forward;
    frame.tensor = compression::builtinCodecs().make("none")->encode(torch::stack({ids, flags}, -1));
    queue->inbound.push_back(frame);
    std::vector<std::unique_ptr<daemon::PeerLink>> producers;
    producers.push_back(std::move(queue));
    producers.push_back(std::make_unique<ScriptedLink>());
    runner.connectProducers(std::move(producers));
    try {
      runner.runStep(0);
    } catch (const WireError& e) {
      return e.what();
    } catch (const PeerError& e) {
      return std::string("peer: ") + e.what();
    }
    return "";
  };
  const at::Tensor ids = torch::randint(0, 257, {2, 8}, torch::kLong), flags = torch::randint(0, 2, {2, 8}, torch::kLong);
  // In range: used, then the step waits for producer 1, which never sends.
  CHECK(run(ids, flags).rfind("peer: no forward frame of step 1", 0) == 0);
  CHECK_THAT(run(ids.index_put({torch::tensor(1), torch::tensor(3)}, torch::tensor(257)), flags),
             Catch::Contains("from producer 0 carries token IDs in [") && Catch::Contains("the vocabulary is [0, 257)"));
  CHECK_THAT(run(ids.index_put({torch::tensor(0), torch::tensor(0)}, torch::tensor(-5)), flags),
             Catch::Contains("token IDs in [-5,"));
  CHECK_THAT(run(ids, flags.index_put({torch::tensor(1), torch::tensor(1)}, torch::tensor(2))),
             Catch::Contains("and flags in [0, 2]"));
}

TEST_CASE("a subspace stage takes k coefficients a token: a d_model-wide frame is refused before decoding") {
  // Stage 1 of 3 of a subspace model (k = 4, d_model 16) reads the data itself (its token ids);
  // both methods, the shared subspace and a learned code at each cut.
  const std::string method = GENERATE(as<std::string>{}, "shared", "cut");
  CAPTURE(method);
  protocol::JobSpec spec = protocol::parseJobSpec(R"({"steps": 2, "batch_size": 2, "micro_batches": 1,
    "schedule": "1f1b", "peer_timeout_s": 1,
    "model": {"d_model": 16, "heads": 2, "layers": 3, "d_ff": 32, "seq_len": 8,
              "subspace": {"rank": 4, "method": ")" + method + R"("}},
    "data": {"files": [")" SKYTRAIN_TEST_CORPUS R"("]},
    "stages": [{"daemon": "tcp://a:1", "layers": [0, 1]}, {"daemon": "tcp://b:1", "layers": [1, 2]},
               {"daemon": "tcp://c:1", "layers": [2, 3]}]})");
  const std::string wide = runWith(forward({2, 8, 16}, std::string(2 * 8 * 16 * 4, '\0')), spec);
  CHECK(wide.find("carries shape [2, 8, 16], this stage expects float32 [2, 8, 4]") != std::string::npos);
}
