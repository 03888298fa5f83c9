// A hostile peer on the data port, with real daemons over TCP loopback (DESIGN.md
// "Security", "Failures"): frames from a daemon that is not the sender's neighbour in the
// job are dropped and counted, and crafted frames from the neighbour itself end the attempt
// with the reason while the daemons stay up.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <atomic>
#include <thread>

#include "compression/wire/tensor_frame.h"
#include "daemon/daemon.h"
#include "daemon/stage/stage_host.h"
#include "daemon_fixture.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;
using protocol::Role;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_CASE("a third, authorized daemon's frames and reports are dropped; the job ends bit-identical",
          "[integration][security]") {
  TestKeys keys;
  keys.add("user", Role::Client);
  keys.add("intruder", Role::Daemon);
  keys.add("inja", Role::Daemon);
  keys.add("injb", Role::Daemon);
  TestDaemon a("inja", {&keys}), b("injb", {&keys});
  zmq::context_t context;
  const auto spec = twoStageSpec(a.control(), b.control(), 40);
  const Json quiet = runJob(context, a.control(), spec, keys.as("user", a.publicKey()));
  REQUIRE(quiet["state"] == "succeeded");

  protocol::ControlClient user(context, a.control(), keys.as("user", a.publicKey()));
  const std::string job = user.request({{"type", "submit"}, {"spec", spec.dump()}}, seconds(5))["job"];
  const uint64_t jobKey = daemon::jobKey(job);
  const std::string dataA = ping(context, a, keys.as("user", a.publicKey()))["data"];
  const std::string dataB = ping(context, b, keys.as("user", b.publicKey()))["data"];
  std::atomic<bool> done{false};
  std::thread intruder([&] {
    const auto toA = keys.as("intruder", a.publicKey()), toB = keys.as("intruder", b.publicKey());
    using compression::FrameDirection;
    for (uint64_t round = 0; !done; ++round) {
      const uint64_t step = round % 40;
      for (uint32_t mb = 0; mb < 2; ++mb) {
        auto forward = forgedFrame(jobKey, step, mb, 1, FrameDirection::Forward, {2, 8, 16});
        auto backward = forgedFrame(jobKey, step, mb, 0, FrameDirection::Backward, {2, 8, 16});
        sendFrame(context, dataB, toB, forward);
        sendFrame(context, dataA, toA, backward);
      }
      const Json failed = {{"type", "stage.report"}, {"job", job}, {"stage", 1}, {"kind", "failed"}, {"error", "forged"}};
      const Json finished = {{"type", "stage.report"}, {"job", job}, {"stage", 0}, {"kind", "done"}};
      // Step reports whose values by cut are out of bounds (a crafted layer or value, too many
      // cuts): code shares, and a sender's loss.
      Json shares = Json::object();
      for (int layer = 1; layer <= 2000; ++layer) shares[std::to_string(layer)] = 0.5;
      const Json flood = {{"type", "stage.report"}, {"job", job}, {"stage", 1}, {"kind", "step"},
                          {"step", step}, {"code_share", shares}, {"sender_loss", shares}};
      const Json crafted = {{"type", "stage.report"}, {"job", job}, {"stage", 1}, {"kind", "step"},
                            {"step", step}, {"code_share", {{"../1", 1e300}}}};
      const Json craftedLoss = {{"type", "stage.report"}, {"job", job}, {"stage", 0}, {"kind", "step"},
                                {"step", step}, {"sender_loss", {{"1", -1.0}, {"01", 1e300}}}};
      sendRaw(context, a.control(), toA, {failed.dump()});
      sendRaw(context, a.control(), toA, {finished.dump()});
      sendRaw(context, a.control(), toA, {flood.dump()});
      sendRaw(context, a.control(), toA, {crafted.dump()});
      sendRaw(context, a.control(), toA, {craftedLoss.dump()});
      const Json abort = {{"type", "stage.abort"}, {"job", job}, {"stage", 1}};
      sendRaw(context, b.control(), toB, {abort.dump()});
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  const Json status = waitForEnd(user, job);
  done = true;
  intruder.join();
  INFO(status.dump());
  REQUIRE(status["state"] == "succeeded");
  requireSameWeights(quiet["id"], job, 2, {&a, &b}, {&a, &b});
  keys.add("root", Role::Admin);
  a.daemon().requestReload();
  b.daemon().requestReload();
  std::this_thread::sleep_for(milliseconds(300));
  const Json countersA = ping(context, a, keys.as("root", a.publicKey()))["refused"];
  const Json countersB = ping(context, b, keys.as("root", b.publicKey()))["refused"];
  CHECK(countersA["reports"].get<int>() > 0);
  CHECK(countersA["frames"].get<int>() > 0);
  CHECK(countersB["frames"].get<int>() > 0);
  CHECK(countersB["requests"].get<int>() > 0);
}

TEST_CASE("a fan-in's producer cannot pass its frames off as another producer's; the job ends identical",
          "[integration][security][fan-in]") {
  TestKeys keys;
  keys.add("user", Role::Client);
  keys.add("root", Role::Admin);
  for (const char* name : {"pga", "pgc", "pdisc"}) keys.add(name, Role::Daemon);
  TestDaemon ga("pga", {&keys}), gc("pgc", {&keys}), disc("pdisc", {&keys});
  zmq::context_t context;
  const Json spec = {{"name", "electra"}, {"seed", 5}, {"steps", 30}, {"batch_size", 4}, {"micro_batches", 1},
                     {"model", {{"kind", "electra"}, {"vocab_size", 257}, {"d_model", 16}, {"heads", 2}, {"layers", 1},
                                {"d_ff", 32}, {"seq_len", 8}, {"generator", {{"d_model", 8}, {"heads", 2}, {"layers", 1}, {"d_ff", 16}}}}},
                     {"data", {{"files", {SKYTRAIN_TEST_CORPUS}}}},
                     {"stages", {{{"daemon", ga.control()}}, {{"daemon", gc.control()}}, {{"daemon", disc.control()}}}}};
  const Json quiet = runJob(context, disc.control(), spec, keys.as("user", disc.publicKey()));
  REQUIRE(quiet["state"] == "succeeded");

  protocol::ControlClient user(context, disc.control(), keys.as("user", disc.publicKey()));
  const std::string job = user.request({{"type", "submit"}, {"spec", spec.dump()}}, seconds(5))["job"];
  const uint64_t jobKey = daemon::jobKey(job);
  const std::string data = ping(context, disc, keys.as("user", disc.publicKey()))["data"];
  std::atomic<bool> done{false};
  std::thread impostor([&] {  // generator 2's daemon, with its own key, claiming generator 1's micro-batches
    const auto asGc = keys.as("pgc", disc.publicKey());
    for (uint64_t round = 0; !done; ++round) {
      auto forged = forgedFrame(jobKey, round % 30, /*producer 0, micro-batch 0*/ 0, 2, compression::FrameDirection::Forward,
                                {4, 8, 2});
      sendFrame(context, data, asGc, forged);
      auto unknown = forgedFrame(jobKey, round % 30, 7u << 16, 2, compression::FrameDirection::Forward, {4, 8, 2});
      sendFrame(context, data, asGc, unknown);
      std::this_thread::sleep_for(milliseconds(10));
    }
  });
  const Json status = waitForEnd(user, job);
  done = true;
  impostor.join();
  INFO(status.dump().substr(0, 3000));
  REQUIRE(status["state"] == "succeeded");
  for (size_t i = 0; i < quiet["steps"].size(); ++i) CHECK(status["steps"][i]["stage_losses"] == quiet["steps"][i]["stage_losses"]);
  disc.daemon().requestReload();
  std::this_thread::sleep_for(milliseconds(300));
  CHECK(ping(context, disc, keys.as("root", disc.publicKey()))["refused"]["frames"].get<int>() > 0);
}

TEST_CASE("a neighbour's crafted gradient norm in a delayed job ends the attempt with the reason; the daemons stay up",
          "[integration][security][delayed]") {
  TestKeys keys;
  keys.add("user", Role::Client);
  keys.add("root", Role::Admin);
  keys.add("norma", Role::Daemon);
  keys.add("normb", Role::Daemon);
  TestDaemon a("norma", {&keys}), b("normb", {&keys});
  zmq::context_t context;
  Json spec = twoStageSpec(a.control(), b.control(), 5000);
  spec["update"] = "delayed";
  spec["optimizer"] = {{"clip_norm", 1.0}, {"warmup_steps", 2}};
  spec["failure"] = {{"max_restarts", 0}};
  protocol::ControlClient user(context, a.control(), keys.as("user", a.publicKey()));
  const std::string job = user.request({{"type", "submit"}, {"spec", spec.dump()}}, seconds(5))["job"];
  const uint64_t jobKey = daemon::jobKey(job);
  int64_t done = 0;
  for (auto deadline = std::chrono::steady_clock::now() + seconds(60);
       done < 5 && std::chrono::steady_clock::now() < deadline;) {
    done = user.request({{"type", "status"}, {"job", job}}, seconds(5))["job"].value("steps_done", int64_t{0});
    std::this_thread::sleep_for(milliseconds(20));
  }
  REQUIRE(done >= 5);
  // Stage 0's own key: the norm it sends stage 1 for a step well ahead, negative. Stage 1
  // keeps it aside (norms may run ahead under the delayed update). Then either that step
  // takes it (a negative norm) or stage 0's real norm of that step arrives first (a second
  // norm for one step): both end the attempt, naming the step.
  const std::string dataB = ping(context, b, keys.as("user", b.publicKey()))["data"];
  const uint64_t ahead = static_cast<uint64_t>(done) + 400;
  sendFrame(context, dataB, keys.as("norma", b.publicKey()),
            forgedFrame(jobKey, ahead, 0, 1, compression::FrameDirection::NormDown, torch::full({}, -1.0)));
  const Json status = waitForEnd(user, job);
  INFO(status.dump().substr(0, 3000));
  CHECK(status["state"] == "failed");
  const std::string error = status["error"];
  const std::string step = std::to_string(ahead + 1);  // as messages number steps, from 1
  CHECK(((error.find("negative gradient norm") != std::string::npos && error.find("step " + step) != std::string::npos) ||
         error.find("norm down frame step " + step + " ") != std::string::npos));
  CHECK(status["steps_done"].get<int64_t>() <= static_cast<int64_t>(ahead) + 2);
  // Both daemons serve on: the next job on them runs to the end.
  for (const TestDaemon* d : {&a, &b}) CHECK(ping(context, *d, keys.as("root", d->publicKey()))["refused"].is_object());
  const Json next = runJob(context, a.control(), twoStageSpec(a.control(), b.control(), 5), keys.as("user", a.publicKey()));
  CHECK(next["state"] == "succeeded");
}

TEST_CASE("a neighbour's crafted \"+pred\" gradients end the attempt; the daemons stay up and run the next +pred job",
          "[integration][security][pred]") {
  TestKeys keys;
  keys.add("user", Role::Client);
  keys.add("root", Role::Admin);
  keys.add("preda", Role::Daemon);
  keys.add("predb", Role::Daemon);
  TestDaemon a("preda", {&keys}), b("predb", {&keys});
  zmq::context_t context;
  Json spec = twoStageSpec(a.control(), b.control(), 50);
  spec["compression"] = {{"forward", "q13+pred"}, {"backward", "q13"}};
  spec["failure"] = {{"max_restarts", 0}};
  const std::string dataA = ping(context, a, keys.as("user", a.publicKey()))["data"];
  protocol::ControlClient user(context, a.control(), keys.as("user", a.publicKey()));
  const std::string job = user.request({{"type", "submit"}, {"spec", spec.dump()}}, seconds(5))["job"];
  const uint64_t jobKey = daemon::jobKey(job);
  // Stage 1's own key sends stage 0 gradients "encoded" with q13+pred, which a backward stream
  // cannot be (stage 0 has no prediction to add back). Sent from before the job starts, over
  // and over: whichever frame stage 0 is waiting for when the first arrives (a link probe's
  // reply, or the gradient itself), the attempt ends with the reason, and nothing is decoded
  // into a shape this stage does not expect.
  auto crafted = forgedFrame(jobKey, 0, 0, 0, compression::FrameDirection::Backward, {2, 8, 16});
  crafted.tensor.codec = "q13+pred";
  crafted.tensor.payload.resize(2 * 8 * 16 / 2);
  std::atomic<bool> done{false};
  std::thread neighbour([&] {
    const auto asB = keys.as("predb", a.publicKey());
    while (!done) {
      sendFrame(context, dataA, asB, crafted);
      std::this_thread::sleep_for(milliseconds(1));
    }
  });
  const Json status = waitForEnd(user, job);
  done = true;
  neighbour.join();
  INFO(status.dump().substr(0, 3000));
  CHECK(status["state"] == "failed");
  const std::string error = status["error"];
  CHECK((error.find("needs token IDs this stage does not hold") != std::string::npos ||
         error.find("was expected") != std::string::npos));
  for (const TestDaemon* d : {&a, &b}) CHECK(ping(context, *d, keys.as("root", d->publicKey()))["refused"].is_object());
  Json next = twoStageSpec(a.control(), b.control(), 5);
  next["compression"] = {{"forward", "q13+pred"}, {"backward", "q13"}};
  CHECK(runJob(context, a.control(), next, keys.as("user", a.publicKey()))["state"] == "succeeded");
}
