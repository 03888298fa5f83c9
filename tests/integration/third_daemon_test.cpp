// A hostile authorised daemon that takes no part in a job (DESIGN.md "Security"), with three
// real daemons over TCP loopback: what it says about a job it does not coordinate — its
// identity, its owner — is refused, and the job ends as if it had said nothing.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <filesystem>
#include <thread>

#include "daemon/daemon.h"
#include "daemon/jobs/record_files.h"
#include "daemon/net/data_router.h"
#include "daemon/protocol/job_identity.h"
#include "daemon/stage/stage_host.h"
#include "daemon_fixture.h"
#include "scheduler/error.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;
using protocol::Role;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

// The request's error, or "" when it succeeded.
std::string errorOf(protocol::ControlClient& client, const Json& request) {
  try {
    client.request(request, seconds(10));
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// The proof the coordinator keeps in its job record (as if it leaked), read as the daemon
// reads it: record.json, else the previous generation while a new one is written.
std::string recordedProof(const TestDaemon& coordinator, const std::string& job) {
  const daemon::RecordFiles files(coordinator.dir().string());
  return files.read(files.jobDir(job)).value().proof;
}

Json prepare(const std::string& job, const std::string& proof, int stage, int attempt, const Json& spec,
             const std::string& coordinator, const std::string& owner) {
  return {{"type", "stage.prepare"}, {"job", job}, {"proof", proof}, {"stage", stage}, {"attempt", attempt},
          {"spec", spec.dump()}, {"owner", owner}, {"coordinator", coordinator}};
}

}  // namespace

TEST_CASE("a frame key is one stage instance's: a second open of it is refused, and only its owner closes it",
          "[security]") {
  zmq::context_t context;
  daemon::AccessList access;
  daemon::SecurityCounters counters;
  daemon::DataRouter router(context, "tcp://127.0.0.1:*", access, counters, 1 << 20);
  const uint64_t key = daemon::jobKey("00000000000000ab", 0, 0);
  const auto mailbox = router.open(key, 1);
  CHECK_THROWS_WITH(router.open(key, 1), Catch::Contains("collides with a stage already hosted here"));
  CHECK_NOTHROW(router.open(key, 2));  // another stage of the same instance
  router.close(key, 1, nullptr);       // a stranger's close: the route stays
  CHECK_THROWS(router.open(key, 1));
  router.close(key, 1, mailbox.get());
  CHECK_NOTHROW(router.open(key, 1));
  // The key hashes the whole instance: the old XOR of its parts let another id collide.
  CHECK(daemon::jobKey("00000000000000ab", 1, 0) != daemon::jobKey("00000000000000ab", 0, 0));
  CHECK(daemon::jobKey("9e3779b97f4a7cbe", 1, 0) != daemon::jobKey("00000000000000ab", 0, 0));
  CHECK(daemon::jobKey("00000000000000ab", 0, 1) != daemon::jobKey("00000000000000ab", 1, 0));
}

TEST_CASE("a third daemon cannot take a running job's frames, abort it or re-prepare it; the job ends bit-identical",
          "[integration][security]") {
  TestKeys keys;
  keys.add("user", Role::Client);
  keys.add("root", Role::Admin);
  for (const char* name : {"tda", "tdb", "tdc"}) keys.add(name, Role::Daemon);
  TestDaemon a("tda", {&keys}), b("tdb", {&keys}), c("tdc", {&keys});
  zmq::context_t context;
  const Json spec = twoStageSpec(a.control(), b.control(), 30);
  const Json quiet = runJob(context, a.control(), spec, keys.as("user", a.publicKey()));
  REQUIRE(quiet["state"] == "succeeded");

  protocol::ControlClient user(context, a.control(), keys.as("user", a.publicKey()));
  const std::string job = user.request({{"type", "submit"}, {"spec", spec.dump()}}, seconds(5))["job"];
  // Until b hosts the job's stage 1 (its claim is on disk from the prepare on).
  for (int i = 0; i < 200 && !std::filesystem::exists(b.dir() / "jobs" / job / "stage-1.owner.json"); ++i) {
    std::this_thread::sleep_for(milliseconds(50));
  }
  std::this_thread::sleep_for(milliseconds(100));
  protocol::ControlClient third(context, b.control(), keys.as("tdc", b.publicKey()));
  // The victim's id (shown on /metrics), whatever the stage or attempt, with no proof, with
  // a proof of its own, or with the victim's proof (say it leaked): the id was made from the
  // victim coordinator's key, so no other key can prepare it.
  const std::string victimProof = recordedProof(a, job);
  const std::string ownProof = protocol::newJobIdentity(keys.get("tdc").publicKey).proof;
  for (const int stage : {0, 1}) {
    INFO("stage " << stage);
    for (const auto& proof : {ownProof, victimProof}) {
      CHECK_THAT(errorOf(third, prepare(job, proof, stage, 7, spec, c.control(), keys.get("tdc").publicKey)),
                 Catch::Contains("the job's id was not made by the daemon preparing it"));
    }
    CHECK_THAT(errorOf(third, prepare(job, "", stage, 7, spec, c.control(), keys.get("tdc").publicKey)),
               Catch::Contains("is hosted here for another coordinator"));
  }
  // The id XOR the old key's attempt constant, at attempt 1, had the victim's frame key under
  // the old jobKey: preparing and aborting it erased the victim's route. Now no daemon can
  // prepare an id it did not make, and its own jobs' keys are refused should they collide.
  char colliding[17];
  std::snprintf(colliding, sizeof colliding, "%016llx",
                static_cast<unsigned long long>(std::stoull(job, nullptr, 16) ^ 0x9e3779b97f4a7c15ULL));
  CHECK_THAT(errorOf(third, prepare(colliding, "", 1, 1, spec, c.control(), keys.get("user").publicKey)),
             Catch::Contains("a prepare without a proof that the sender made the job"));
  // Nor commit the victim's steps (a healing job's word to apply an update).
  CHECK_THAT(errorOf(third, {{"type", "stage.commit"}, {"job", job}, {"stage", 1}, {"step", 1000}}),
             Catch::Contains("takes requests only from its job's coordinator"));
  const auto own = protocol::newJobIdentity(keys.get("tdc").publicKey);
  // Its own job's stage from another's memory: only a healing job's stage takes "memory".
  Json fromMemory = prepare(own.id, own.proof, 1, 1, spec, c.control(), keys.get("user").publicKey);
  fromMemory["resume_from"] = "memory";
  fromMemory["resume_step"] = 3;
  CHECK_THAT(errorOf(third, fromMemory), Catch::Contains("is for a job that heals"));
  CHECK(errorOf(third, prepare(own.id, own.proof, 1, 1, spec, c.control(), keys.get("user").publicKey)) == "");
  CHECK(errorOf(third, {{"type", "stage.abort"}, {"job", own.id}, {"stage", 1}}) == "");
  // An inferred input_shape is taken only by a TorchScript stage after the first whose spec
  // gives none: on this gpt job's stage it is refused, and the daemon stays up.
  const auto shaped = protocol::newJobIdentity(keys.get("tdc").publicKey);
  Json withShape = prepare(shaped.id, shaped.proof, 1, 1, spec, c.control(), keys.get("user").publicKey);
  withShape["input_shape"] = {16, 32};
  CHECK_THAT(errorOf(third, withShape), Catch::Contains("only a TorchScript stage after the first takes one"));
  withShape["input_shape"] = {1 << 20, 1 << 20};
  CHECK_THAT(errorOf(third, withShape), Catch::Contains("$.input_shape"));
  const Json status = waitForEnd(user, job);
  INFO(status.dump());
  REQUIRE(status["state"] == "succeeded");
  requireSameWeights(quiet["id"], job, 2, {&a, &b}, {&a, &b});
  for (const auto* d : {&a, &b, &c}) CHECK(ping(context, *d, keys.as("root", d->publicKey()))["ok"] == true);
}

TEST_CASE("ownership is not hearsay: no daemon can re-prepare a finished job for another owner, who then cannot "
          "export it",
          "[integration][security]") {
  TestKeys keys;
  keys.add("alice", Role::Client);
  keys.add("mallory", Role::Client);
  for (const char* name : {"oda", "odb", "odc"}) keys.add(name, Role::Daemon);
  TestDaemon a("oda", {&keys}), b("odb", {&keys}), c("odc", {&keys});
  zmq::context_t context;
  const Json spec = twoStageSpec(a.control(), b.control(), 4);
  const Json done = runJob(context, a.control(), spec, keys.as("alice", a.publicKey()));
  REQUIRE(done["state"] == "succeeded");
  const std::string job = done["id"];
  const std::string mallory = keys.get("mallory").publicKey;

  // A third daemon names mallory the owner (with the job's own proof, say it leaked); so does
  // the job's own coordinator, later.
  const std::string proof = recordedProof(a, job);
  protocol::ControlClient third(context, b.control(), keys.as("odc", b.publicKey()));
  CHECK_THAT(errorOf(third, prepare(job, proof, 1, 1, spec, c.control(), mallory)),
             Catch::Contains("the job's id was not made by the daemon preparing it"));
  CHECK_THAT(errorOf(third, prepare(job, "", 1, 1, spec, c.control(), mallory)),
             Catch::Contains("was prepared here by another coordinator"));
  protocol::ControlClient coordinator(context, b.control(), keys.as("oda", b.publicKey()));
  CHECK_THAT(errorOf(coordinator, prepare(job, proof, 1, 1, spec, a.control(), mallory)),
             Catch::Contains("belongs to another owner here"));
  // A stage the job never had on this daemon, same answer: the job is claimed, not the stage.
  CHECK_THAT(errorOf(coordinator, prepare(job, proof, 0, 1, spec, a.control(), mallory)),
             Catch::Contains("belongs to another owner here"));

  // A dry run claims nothing, so it is only for a new job its sender made: not one with state
  // here (whoever sends it), nor one without a proof.
  Json dryRun = prepare(job, proof, 1, 2, spec, a.control(), mallory);
  dryRun["dry_run"] = true;
  CHECK_THAT(errorOf(coordinator, dryRun), Catch::Contains("a dry run of job " + job + ", which has state on this daemon"));
  dryRun["proof"] = "";
  CHECK_THAT(errorOf(coordinator, dryRun), Catch::Contains("a dry run needs the job's proof"));

  const Json exportRequest = {{"type", "export"}, {"job", job}, {"stage", 1}, {"step", -1}, {"offset", 0}};
  protocol::ControlClient asMallory(context, b.control(), keys.as("mallory", b.publicKey()));
  CHECK_THAT(errorOf(asMallory, exportRequest), Catch::Contains("does not own the job"));
  protocol::ControlClient asAlice(context, b.control(), keys.as("alice", b.publicKey()));
  CHECK(errorOf(asAlice, exportRequest) == "");
  for (const auto* d : {&a, &b, &c}) CHECK(ping(context, *d, keys.as("alice", d->publicKey()))["ok"] == true);
}
