// Security with real daemons over TCP loopback (DESIGN.md "Security"): CURVE keys and ZAP,
// ownership of jobs, a third authorized daemon's frames and reports dropped, the encrypted
// pipeline bit-identical to the plaintext one, and each way one request used to end or
// exhaust a daemon, as a regression test.
#include <catch2/catch.hpp>
#include <torch/torch.h>
#include <zmq_addon.hpp>

#include <atomic>
#include <fstream>
#include <thread>

#include "compression/codec_registry.h"
#include "compression/tensor_frame.h"
#include "daemon/daemon.h"
#include "daemon_fixture.h"
#include "scheduler/error.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;
using protocol::Role;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

Json tinySpec(const std::string& a, const std::string& b, int steps) {
  return {{"name", "secure"},
          {"seed", 3},
          {"steps", steps},
          {"batch_size", 4},
          {"micro_batches", 2},
          {"schedule", "1f1b"},
          {"model", {{"d_model", 16}, {"heads", 2}, {"layers", 2}, {"d_ff", 32}, {"seq_len", 8}}},
          {"data", {{"files", {SKYTRAIN_TEST_CORPUS}}}},
          {"eval", {{"samples", 4}}},
          {"stages", {{{"daemon", a}, {"layers", {0, 1}}}, {{"daemon", b}, {"layers", {1, 2}}}}}};
}

// Expects `fn` to throw an error containing `needle`, within `limit`.
template <typename Fn>
void expectError(Fn&& fn, const std::string& needle, milliseconds limit = milliseconds(3000)) {
  const auto start = std::chrono::steady_clock::now();
  try {
    fn();
    FAIL("no error; expected one containing \"" << needle << "\"");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
  CHECK(std::chrono::steady_clock::now() - start < limit);
}

Json ping(zmq::context_t& context, const TestDaemon& d, const protocol::ClientSecurity& as) {
  return protocol::ControlClient(context, d.control(), as).request({{"type", "ping"}}, seconds(5));
}

Json waitForEnd(protocol::ControlClient& client, const std::string& job) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    Json status = client.request({{"type", "status"}, {"job", job}}, seconds(5))["job"];
    if (status["state"] != "preparing" && status["state"] != "running") return status;
    std::this_thread::sleep_for(milliseconds(50));
  }
  FAIL("job " << job << " did not end");
  return {};
}

void requireSameWeights(const TestDaemon& a, const std::string& jobA, const TestDaemon& b, const std::string& jobB,
                        int stages, const std::vector<const TestDaemon*>& hostsA,
                        const std::vector<const TestDaemon*>& hostsB) {
  for (int i = 0; i < stages; ++i) {
    const auto name = "stage-" + std::to_string(i) + ".pt";
    const auto left = loadStageWeights(hostsA[i]->dir() / "jobs" / jobA / name);
    const auto right = loadStageWeights(hostsB[i]->dir() / "jobs" / jobB / name);
    REQUIRE(left.size() == right.size());
    for (const auto& [key, tensor] : left) {
      INFO(key);
      CHECK(torch::equal(tensor, right.at(key)));
    }
  }
}

// Sends a raw message over its own CURVE connection.
void sendRaw(zmq::context_t& context, const std::string& endpoint, const protocol::ClientSecurity& as,
             const std::vector<std::string>& parts) {
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  protocol::applyClientSecurity(socket, as);
  socket.set(zmq::sockopt::linger, 500);
  socket.connect(endpoint);
  for (size_t i = 0; i < parts.size(); ++i) {
    socket.send(zmq::buffer(parts[i]), i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

compression::TensorFrame forgedFrame(uint64_t job, uint64_t step, uint32_t microBatch, uint16_t stage,
                                     compression::FrameDirection direction, std::vector<int64_t> shape) {
  compression::TensorFrame frame;
  frame.job = job;
  frame.step = step;
  frame.microBatch = microBatch;
  frame.stage = stage;
  frame.direction = direction;
  frame.tensor = compression::builtinCodecs().make("none")->encode(torch::full(shape, 1e6));
  return frame;
}

}  // namespace

TEST_CASE("keys: an unknown key, a wrong daemon key and a plaintext client are refused at once, with the reason",
          "[integration][security]") {
  TestKeys keys;
  keys.add("user", Role::Client);
  keys.add("stranger", Role::Client, /*authorized=*/false);
  keys.add("other-daemon", Role::Daemon);
  TestDaemon d("keys", {&keys});
  zmq::context_t context;

  CHECK(ping(context, d, keys.as("user", d.publicKey()))["ok"] == true);
  expectError([&] { ping(context, d, keys.as("stranger", d.publicKey())); },
              "daemon " + d.control() + " refused key 'stranger' (not in its authorized keys)");
  // Right client key, wrong server key: never trusted, reported as a handshake failure.
  expectError([&] { ping(context, d, keys.as("user", keys.get("other-daemon").publicKey)); },
              "closed the connection during the CURVE handshake: its public key is not");
  expectError([&] { ping(context, d, protocol::ClientSecurity{}); }, "it requires CURVE");
  const Json admin = ping(context, d, keys.as("other-daemon", d.publicKey()));
  CHECK(admin["you"] == "'other-daemon' (daemon)");
}

TEST_CASE("keys: a key removed from authorized_keys is refused after a reload, on its open connection too",
          "[integration][security]") {
  TestKeys keys;
  keys.add("admin", Role::Admin);
  TestDaemon d("reload", {&keys});
  zmq::context_t context;
  const auto bob = keys.add("bob", Role::Client);
  // Not yet reloaded: bob is unknown.
  expectError([&] { ping(context, d, keys.as("bob", d.publicKey())); }, "refused key 'bob'");
  d.daemon().requestReload();
  std::this_thread::sleep_for(milliseconds(300));
  protocol::ControlClient bobClient(context, d.control(), keys.as("bob", d.publicKey()));
  CHECK(bobClient.request({{"type", "ping"}}, seconds(5))["ok"] == true);
  // Revoke bob: his open connection is refused message by message.
  std::ofstream(keys.authorizedKeys()) << keys.get("admin").publicKey << " admin admin\n";
  d.daemon().requestReload();
  std::this_thread::sleep_for(milliseconds(300));
  expectError([&] { bobClient.request({{"type", "ping"}}, seconds(5)); }, "is no longer authorized");
}

TEST_CASE("authorisation: a client sees and cancels only its own jobs; an admin any; stage requests are for daemons",
          "[integration][security]") {
  TestKeys keys;
  keys.add("alice", Role::Client);
  keys.add("bob", Role::Client);
  keys.add("root", Role::Admin);
  keys.add("owna", Role::Daemon);  // every daemon key first: each daemon reads authorized_keys when it starts
  keys.add("ownb", Role::Daemon);
  TestDaemon a("owna", {&keys}), b("ownb", {&keys});
  zmq::context_t context;
  protocol::ControlClient alice(context, a.control(), keys.as("alice", a.publicKey()));
  protocol::ControlClient bob(context, a.control(), keys.as("bob", a.publicKey()));
  protocol::ControlClient root(context, a.control(), keys.as("root", a.publicKey()));
  const std::string job = alice.request({{"type", "submit"}, {"spec", tinySpec(a.control(), b.control(), 100000).dump()}},
                                        seconds(5))["job"];
  for (int i = 0; i < 200 && alice.request({{"type", "status"}, {"job", job}}, seconds(5))["job"]["state"] != "running"; ++i) {
    std::this_thread::sleep_for(milliseconds(50));
  }

  expectError([&] { bob.request({{"type", "status"}, {"job", job}}, seconds(5)); },
              "reading job " + job + " needs the admin role: it belongs to 'alice'");
  expectError([&] { bob.request({{"type", "cancel"}, {"job", job}}, seconds(5)); }, "cancelling job " + job);
  CHECK(bob.request({{"type", "list"}}, seconds(5))["jobs"].empty());
  CHECK(alice.request({{"type", "list"}}, seconds(5))["jobs"].size() == 1);
  CHECK(root.request({{"type", "list"}}, seconds(5))["jobs"].size() == 1);
  // A client may not drive stages, whoever's they are.
  expectError([&] { bob.request({{"type", "stage.abort"}, {"job", job}, {"stage", 0}}, seconds(5)); },
              "stage.abort is for daemons");
  // A daemon that is not the job's coordinator may not either.
  protocol::ControlClient otherDaemon(context, a.control(), keys.as("ownb", a.publicKey()));
  expectError([&] { otherDaemon.request({{"type", "stage.abort"}, {"job", job}, {"stage", 0}}, seconds(5)); },
              "takes requests only from its job's coordinator");
  CHECK(alice.request({{"type", "status"}, {"job", job}}, seconds(5))["job"]["owner"] == "alice");
  CHECK(root.request({{"type", "status"}, {"job", job}}, seconds(5))["job"]["state"] != "cancelled");
  CHECK(root.request({{"type", "cancel"}, {"job", job}}, seconds(5))["state"] == "cancelled");
  const Json counters = root.request({{"type", "ping"}}, seconds(5))["refused"];
  CHECK(counters["requests"].get<int>() >= 4);
}

TEST_CASE("a third, authorized daemon's frames and reports are dropped; the job ends bit-identical",
          "[integration][security]") {
  TestKeys keys;
  keys.add("user", Role::Client);
  keys.add("intruder", Role::Daemon);
  keys.add("inja", Role::Daemon);
  keys.add("injb", Role::Daemon);
  TestDaemon a("inja", {&keys}), b("injb", {&keys});
  zmq::context_t context;
  const auto spec = tinySpec(a.control(), b.control(), 40);
  const Json quiet = runJob(context, a.control(), spec, keys.as("user", a.publicKey()));
  REQUIRE(quiet["state"] == "succeeded");

  protocol::ControlClient user(context, a.control(), keys.as("user", a.publicKey()));
  const std::string job = user.request({{"type", "submit"}, {"spec", spec.dump()}}, seconds(5))["job"];
  const uint64_t jobKey = std::stoull(job, nullptr, 16);
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
        sendRaw(context, dataB, toB, {compression::encodeFrameHeader(forward), forward.tensor.payload});
        sendRaw(context, dataA, toA, {compression::encodeFrameHeader(backward), backward.tensor.payload});
      }
      const Json failed = {{"type", "stage.report"}, {"job", job}, {"stage", 1}, {"kind", "failed"}, {"error", "forged"}};
      const Json finished = {{"type", "stage.report"}, {"job", job}, {"stage", 0}, {"kind", "done"}};
      sendRaw(context, a.control(), toA, {failed.dump()});
      sendRaw(context, a.control(), toA, {finished.dump()});
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
  requireSameWeights(a, quiet["id"], a, job, 2, {&a, &b}, {&a, &b});
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

TEST_CASE("replicas meet over the authenticated control channel; another daemon cannot touch their store",
          "[integration][security]") {
  TestKeys keys;
  keys.add("user", Role::Client);
  keys.add("intruder", Role::Daemon);
  keys.add("repa", Role::Daemon);
  keys.add("repb", Role::Daemon);
  TestDaemon a("repa", {&keys}), b("repb", {&keys});
  zmq::context_t context;
  Json spec = tinySpec(a.control(), b.control(), 20);
  spec["micro_batches"] = 1;
  spec["stages"][0]["replicas"] = {{{"daemon", b.control()}}};  // each daemon hosts a copy of each stage
  spec["stages"][1]["replicas"] = {{{"daemon", a.control()}}};
  protocol::ControlClient user(context, a.control(), keys.as("user", a.publicKey()));
  const std::string job = user.request({{"type", "submit"}, {"spec", spec.dump()}}, seconds(5))["job"];
  std::atomic<bool> done{false};
  std::atomic<int> refused{0}, accepted{0};
  std::thread intruder([&] {
    // A daemon the coordinator trusts for nothing in this job writes and reads the copies'
    // rendezvous keys (c10d's ranks' addresses), as each copy would.
    protocol::ControlClient forger(context, a.control(), keys.as("intruder", a.publicKey()));
    for (int round = 0; !done; ++round) {
      for (const char* op : {"set", "get", "add", "count"}) {
        Json request = {{"type", "store"}, {"job", job}, {"stage", round % 2}, {"replica", round % 2}, {"attempt", 0}, {"op", op}};
        if (std::string(op) != "count") request["keys"] = {"rank_" + std::to_string(round % 2)};
        if (std::string(op) == "set") request["value"] = "AAAA";
        if (std::string(op) == "add") request["delta"] = 1;
        try {
          forger.request(request, seconds(5));
          ++accepted;
        } catch (const Error& e) {
          if (std::string(e.what()).find("does not host that stage") != std::string::npos) ++refused;
        }
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  const Json status = waitForEnd(user, job);
  done = true;
  intruder.join();
  INFO(status.dump());
  REQUIRE(status["state"] == "succeeded");
  CHECK(status["plans"].back()["replicas"] == 2);
  CHECK(accepted == 0);
  CHECK(refused > 0);
}

TEST_CASE("the encrypted pipeline computes bit-identical parameters to the plaintext one", "[integration][security]") {
  TestKeys keys;
  keys.add("user", Role::Client);
  zmq::context_t context;
  keys.add("curvea", Role::Daemon);
  keys.add("curveb", Role::Daemon);
  TestDaemon pa("plaina"), pb("plainb");
  TestDaemon ca("curvea", {&keys}), cb("curveb", {&keys});
  const Json plain = runJob(context, pa.control(), tinySpec(pa.control(), pb.control(), 12));
  const Json curve = runJob(context, ca.control(), tinySpec(ca.control(), cb.control(), 12), keys.as("user", ca.publicKey()));
  REQUIRE(plain["state"] == "succeeded");
  REQUIRE(curve["state"] == "succeeded");
  REQUIRE(plain["steps"].size() == curve["steps"].size());
  for (size_t i = 0; i < plain["steps"].size(); ++i) CHECK(plain["steps"][i]["loss"] == curve["steps"][i]["loss"]);
  requireSameWeights(pa, plain["id"], ca, curve["id"], 2, {&pa, &pb}, {&ca, &cb});
}

TEST_CASE("regressions: requests that used to end or exhaust a daemon are refused and it stays up",
          "[integration][security]") {
  TestKeys keys;
  keys.add("user", Role::Client);
  keys.add("coord", Role::Daemon);
  keys.add("root", Role::Admin);
  const std::string corpusDir = std::filesystem::path(SKYTRAIN_TEST_CORPUS).parent_path().string();
  TestDaemonOptions options{&keys};
  options.dataRoots = {corpusDir, "/dev"};
  options.prepareTimeoutS = 1;
  keys.add("rega", Role::Daemon);
  keys.add("regb", Role::Daemon);
  TestDaemon a("rega", options), b("regb", options);
  zmq::context_t context;
  protocol::ControlClient user(context, a.control(), keys.as("user", a.publicKey()));
  auto submitFails = [&](const Json& spec, const std::string& needle) {
    const std::string job = user.request({{"type", "submit"}, {"spec", spec.dump()}}, seconds(5))["job"];
    const Json status = waitForEnd(user, job);
    INFO(status.dump());
    CHECK(status["state"] == "failed");
    CHECK(status["error"].get<std::string>().find(needle) != std::string::npos);
  };
  auto spec = [&] { return tinySpec(a.control(), b.control(), 2); };

  SECTION("an error message cut inside a multi-byte UTF-8 character") {
    Json s = spec();
    s["steps"] = std::string(29, 'a') + "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9";
    expectError([&] { user.request({{"type", "submit"}, {"spec", s.dump()}}, seconds(5)); }, "$.steps: expected an integer");
  }
  SECTION("a data file that never ends, and files outside the data roots") {
    Json s = spec();
    s["data"]["files"] = {"/dev/zero"};
    submitFails(s, "\"/dev/zero\" is not a regular file");
    s["data"]["files"] = {"/etc/shadow"};
    submitFails(s, "is not under this daemon's data_roots");
    const auto link = std::filesystem::path(corpusDir) / "security_test_link";
    std::filesystem::remove(link);
    std::filesystem::create_symlink("/etc/passwd", link);
    s["data"]["files"] = {link.string()};
    submitFails(s, "(resolved: \"/etc/passwd\") is not under this daemon's data_roots");
    std::filesystem::remove(link);
  }
  SECTION("a model whose weights do not fit is refused with the numbers before it is allocated") {
    Json s = spec();
    s["model"] = {{"d_model", 16384}, {"heads", 16}, {"layers", 2}, {"d_ff", 65536}, {"seq_len", 8}, {"vocab_size", 1 << 20}};
    submitFails(s, "needs an estimated");
    submitFails(s, "over this daemon's memory budget");
  }
  SECTION("a prepared stage that is never started is freed") {
    protocol::ControlClient coord(context, b.control(), keys.as("coord", b.publicKey()));
    Json s = spec();
    coord.request({{"type", "stage.prepare"}, {"job", "00000000000000ab"}, {"stage", 1}, {"spec", s.dump()},
                   {"coordinator", a.control()}},
                  seconds(5));
    CHECK(ping(context, b, keys.as("root", b.publicKey()))["hosted_stages"] == 1);
    std::this_thread::sleep_for(milliseconds(4000));
    CHECK(ping(context, b, keys.as("root", b.publicKey()))["hosted_stages"] == 0);
  }
  SECTION("an oversized request gets an error naming the limit") {
    zmq::socket_t raw(context, zmq::socket_type::dealer);
    protocol::applyClientSecurity(raw, keys.as("user", a.publicKey()));
    raw.connect(a.control());
    const std::string big = "{\"type\": \"ping\", \"pad\": \"" + std::string(protocol::kMaxControlMessageBytes, 'x') + "\"}";
    raw.send(zmq::buffer(big));
    zmq::message_t reply;
    REQUIRE(protocol::waitReadable(raw, seconds(10)));
    REQUIRE(raw.recv(reply));
    CHECK(reply.to_string().find("the limit is 4194304") != std::string::npos);
  }
  SECTION("duplicate keys and deep nesting are refused with their path") {
    const std::string dup = "{\"type\": \"ping\", \"type\": \"list\"}";
    zmq::socket_t raw(context, zmq::socket_type::dealer);
    protocol::applyClientSecurity(raw, keys.as("user", a.publicKey()));
    raw.connect(a.control());
    raw.send(zmq::buffer(dup));
    zmq::message_t reply;
    REQUIRE(protocol::waitReadable(raw, seconds(10)));
    REQUIRE(raw.recv(reply));
    CHECK(reply.to_string().find("$.type: duplicate key") != std::string::npos);
    raw.send(zmq::buffer(std::string(100000, '[')));
    REQUIRE(protocol::waitReadable(raw, seconds(10)));
    REQUIRE(raw.recv(reply));
    CHECK(reply.to_string().find("nested deeper than") != std::string::npos);
    std::string spec2 = spec().dump();
    spec2.insert(1, "\"seed\": 1, ");
    spec2.insert(1, "\"seed\": 2, ");
    expectError([&] { user.request({{"type", "submit"}, {"spec", spec2}}, seconds(5)); }, "$.seed: duplicate key");
  }
  // Whatever came before, both daemons still serve.
  CHECK(ping(context, a, keys.as("user", a.publicKey()))["ok"] == true);
  CHECK(ping(context, b, keys.as("user", b.publicKey()))["ok"] == true);
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
  const uint64_t jobKey = std::stoull(job, nullptr, 16);
  const std::string data = ping(context, disc, keys.as("user", disc.publicKey()))["data"];
  std::atomic<bool> done{false};
  std::thread impostor([&] {  // generator 2's daemon, with its own key, claiming generator 1's micro-batches
    const auto asGc = keys.as("pgc", disc.publicKey());
    for (uint64_t round = 0; !done; ++round) {
      auto forged = forgedFrame(jobKey, round % 30, /*producer 0, micro-batch 0*/ 0, 2, compression::FrameDirection::Forward,
                                {4, 8, 2});
      sendRaw(context, data, asGc, {compression::encodeFrameHeader(forged), forged.tensor.payload});
      auto unknown = forgedFrame(jobKey, round % 30, 7u << 16, 2, compression::FrameDirection::Forward, {4, 8, 2});
      sendRaw(context, data, asGc, {compression::encodeFrameHeader(unknown), unknown.tensor.payload});
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
