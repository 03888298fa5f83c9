// Security with real daemons over TCP loopback (DESIGN.md "Security"): CURVE keys and ZAP,
// ownership of jobs, replicas' store, the encrypted pipeline bit-identical to the plaintext
// one, and each way one request used to end or exhaust a daemon, as a regression test.
// Forged data frames: peer_frames_test.
#include <catch2/catch.hpp>
#include <torch/torch.h>
#include <zmq_addon.hpp>

#include <atomic>
#include <cstring>
#include <fstream>
#include <thread>

#include "compression/codec_registry.h"
#include "compression/wire/tensor_frame.h"
#include "daemon/daemon.h"
#include "daemon/protocol/job_identity.h"
#include "daemon_fixture.h"
#include "scheduler/error.h"
#include "stages/weights/safetensors.h"
#include "stages/tokens/token_files.h"
#include "stages/tokens/token_manifest.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;
using protocol::Role;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

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
  const std::string job = alice.request({{"type", "submit"}, {"spec", twoStageSpec(a.control(), b.control(), 100000).dump()}},
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
  // A client may not drive stages, whoever's they are; the refusal names the key, its name
  // and role here, and the role needed.
  expectError([&] { bob.request({{"type", "stage.abort"}, {"job", job}, {"stage", 0}}, seconds(5)); },
              "stage.abort is for daemons: the key " + keys.get("bob").publicKey.substr(0, 8) +
                  "... is in this daemon's authorized_keys as 'bob' with role client; this request needs role daemon");
  // A daemon that is not the job's coordinator may not either.
  protocol::ControlClient otherDaemon(context, a.control(), keys.as("ownb", a.publicKey()));
  expectError([&] { otherDaemon.request({{"type", "stage.abort"}, {"job", job}, {"stage", 0}}, seconds(5)); },
              "takes requests only from its job's coordinator");
  // Nor make a client's request: named the same way.
  expectError([&] { otherDaemon.request({{"type", "list"}}, seconds(5)); },
              "list is for clients: the key " + keys.get("ownb").publicKey.substr(0, 8) +
                  "... is in this daemon's authorized_keys as 'ownb' with role daemon; this request needs role client or admin");
  CHECK(alice.request({{"type", "status"}, {"job", job}}, seconds(5))["job"]["owner"] == "alice");
  CHECK(root.request({{"type", "status"}, {"job", job}}, seconds(5))["job"]["state"] != "cancelled");
  CHECK(root.request({{"type", "cancel"}, {"job", job}}, seconds(5))["state"] == "cancelled");
  const Json counters = root.request({{"type", "ping"}}, seconds(5))["refused"];
  CHECK(counters["requests"].get<int>() >= 4);
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
  Json spec = twoStageSpec(a.control(), b.control(), 20);
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
  const Json plain = runJob(context, pa.control(), twoStageSpec(pa.control(), pb.control(), 12));
  const Json curve = runJob(context, ca.control(), twoStageSpec(ca.control(), cb.control(), 12), keys.as("user", ca.publicKey()));
  REQUIRE(plain["state"] == "succeeded");
  REQUIRE(curve["state"] == "succeeded");
  REQUIRE(plain["steps"].size() == curve["steps"].size());
  for (size_t i = 0; i < plain["steps"].size(); ++i) CHECK(plain["steps"][i]["loss"] == curve["steps"][i]["loss"]);
  requireSameWeights(plain["id"], curve["id"], 2, {&pa, &pb}, {&ca, &cb});
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
  // Short, for the never-started case below, but not shorter than a loaded machine's prepare of
  // the other stage: at 1 s, stage 0's timeout once failed a job before stage 1's refusal came.
  options.prepareTimeoutS = 3;
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
  auto spec = [&] { return twoStageSpec(a.control(), b.control(), 2); };

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
  SECTION("a stage's own init_from is held to the data roots: no file of the host, no other job's weights") {
    Json s = spec();
    s["stages"][1]["init_from"] = "/etc/passwd";
    submitFails(s, "$.stages[1].init_from[0]: \"/etc/passwd\" (resolved: \"/etc/passwd\") is not under this daemon's data_roots");
    const auto trained = b.dir() / "stage-1.safetensors";  // as another job's weights in a state dir
    std::ofstream(trained) << "not this job's";
    s["stages"][1]["init_from"] = {trained.string()};
    submitFails(s, "is not under this daemon's data_roots");
    std::filesystem::remove(trained);
  }
  SECTION("a crafted Hugging Face directory fails the job with the reason, reads nothing outside itself, and the "
          "daemons stay up") {
    const auto dir = std::filesystem::path(corpusDir) / "security_test_hf";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json") << Json({{"model_type", "llama"}, {"vocab_size", 256}, {"hidden_size", 16},
                                               {"intermediate_size", 32}, {"num_hidden_layers", 3},
                                               {"num_attention_heads", 2}, {"rms_norm_eps", 1e-5}})
                                              .dump();
    auto index = [&](const std::string& shard) {
      std::ofstream(dir / "model.safetensors.index.json")
          << Json({{"weight_map", {{"model.norm.weight", shard}}}}).dump();
    };
    Json s = spec();
    s["model"] = {{"kind", "llama"}, {"d_model", 16}, {"heads", 2}, {"layers", 2}, {"d_ff", 32}, {"seq_len", 8},
                  {"init_from", dir.string()}};
    index("../../../../etc/passwd");
    submitFails(s, "is not a file name in the directory");
    std::filesystem::create_symlink("/etc/passwd", dir / "model-00001-of-00001.safetensors");
    index("model-00001-of-00001.safetensors");
    submitFails(s, "leads outside the directory (to /etc/passwd)");
    std::filesystem::remove(dir / "model-00001-of-00001.safetensors");
    std::filesystem::remove(dir / "model.safetensors.index.json");
    stages::SafeTensors one;
    one.tensors.emplace_back("model.norm.weight", torch::ones({16}));
    std::ofstream(dir / "model.safetensors", std::ios::binary) << stages::encodeSafetensors(one);
    submitFails(s, "num_hidden_layers: config.json has 3, the spec 2");
    for (const auto* d : {&a, &b}) CHECK(ping(context, *d, keys.as("root", d->publicKey()))["ok"] == true);
    std::filesystem::remove_all(dir);
  }
  SECTION("a crafted token corpus fails the job with the file and offset, reads nothing outside the data roots, and "
          "the daemons stay up") {
    const auto dir = std::filesystem::path(corpusDir) / "security_test_tokens";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    {
      stages::TokenShardWriter w((dir / "train-00000.bin").string(), stages::TokenDtype::U16, true);
      w.append(std::vector<int32_t>(4000, 65));
      w.finish();
    }
    stages::TokenManifest manifest;
    manifest.train = {"train-00000.bin"};
    auto writeManifest = [&] { std::ofstream(dir / stages::kTokenManifestName) << stages::tokenManifestJson(manifest); };
    writeManifest();
    Json s = spec();
    s["data"] = {{"format", "tokens"}, {"files", {dir.string()}}};
    // The index symlinked out of the roots.
    std::filesystem::rename(dir / "train-00000.idx", dir / "real.idx");
    std::filesystem::create_symlink("/etc/passwd", dir / "train-00000.idx");
    submitFails(s, "is not under this daemon's data_roots");
    std::filesystem::remove(dir / "train-00000.idx");
    // An index that points past its .bin.
    std::string index;
    {
      std::ifstream in(dir / "real.idx", std::ios::binary);
      index.assign(std::istreambuf_iterator<char>(in), {});
    }
    const int32_t length = 1 << 30;
    std::memcpy(&index[34], &length, sizeof length);
    std::ofstream(dir / "train-00000.idx", std::ios::binary) << index;
    submitFails(s, "past the end of");
    // A manifest naming a file out of the directory.
    manifest.train = {"../../../../etc/passwd"};
    writeManifest();
    submitFails(s, "is not a plain file name");
    for (const auto* d : {&a, &b}) CHECK(ping(context, *d, keys.as("root", d->publicKey()))["ok"] == true);
    std::filesystem::remove_all(dir);
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
    const auto identity = protocol::newJobIdentity(keys.get("coord").publicKey);
    coord.request({{"type", "stage.prepare"}, {"job", identity.id}, {"proof", identity.proof}, {"stage", 1},
                   {"spec", s.dump()}, {"coordinator", a.control()}},
                  seconds(5));
    CHECK(ping(context, b, keys.as("root", b.publicKey()))["hosted_stages"] == 1);
    std::this_thread::sleep_for(milliseconds(6000));
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
