// The daemon's control handler, Daemon::answer (daemon/daemon.h), on any message body: it
// never throws, answers every message but a stage report with a JSON object carrying "ok"
// (and the request's "id"), and leaves stage reports unanswered.
//
// One insecure loopback daemon serves every input. Its state dir holds one finished job,
// kJob, so status, cancel and stage.report reach the job table. Requests that start work
// (kStartsWork) are skipped: they start threads that build models and connect to peers
// (job_spec_fuzz covers their parsing). They are recognised by parsing the request as the
// daemon does, not by a substring, which a JSON escape ("sub\u006dit") would dodge.
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>

#include "daemon/daemon.h"
#include "daemon/ops/config.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/messages.h"
#include "scheduler/error.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace skytrain;
using nlohmann::json;

constexpr const char* kJob = "0123456789abcdef";  // the job the seeds name
// Request types that start a coordinator or a stage ("resume" restarts a job's coordinator).
const std::set<std::string> kStartsWork = {protocol::kSubmit, protocol::kStagePrepare, "resume"};

// A fresh directory on tmpfs when there is one: every job-record write fsyncs.
std::string makeTempRoot() {
  const std::string parent = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : std::filesystem::temp_directory_path().string();
  std::string pattern = parent + "/skytrain-fuzz-XXXXXX";
  FUZZ_REQUIRE(::mkdtemp(pattern.data()) != nullptr, "cannot make a directory under " + parent);
  return pattern;
}

// A finished two-stage job record, in the layout JobTable::load reads.
void writeJobRecord(const std::string& stateDir) {
  const json spec = {{"name", "fuzz"},
                     {"steps", 4},
                     {"batch_size", 4},
                     {"model", {{"d_model", 8}, {"heads", 2}, {"layers", 2}, {"d_ff", 16}, {"seq_len", 8}}},
                     {"data", {{"files", {"/nonexistent/fuzz.txt"}}}},
                     {"stages", {{{"daemon", "tcp://127.0.0.1:1"}, {"layers", {0, 1}}},
                                 {{"daemon", "tcp://127.0.0.1:2"}, {"layers", {1, 2}}}}}};
  const std::string dir = stateDir + "/jobs/" + kJob;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/record.json") << json{{"id", kJob}, {"spec", spec.dump()}, {"state", "succeeded"}}.dump();
}

daemon::Daemon* theDaemon = nullptr;  // never destroyed: its data thread runs until exit
std::string tempRoot;

bool isStageReport(const uint8_t* data, size_t size) {
  try {
    const json message = protocol::parseControlMessage(data, size);
    return message.contains("type") && message["type"] == protocol::kStageReport;
  } catch (const std::exception&) {  // answer() is under test here, not the parser
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // every refusal is logged
  tempRoot = makeTempRoot();
  daemon::DaemonConfig config;
  config.controlEndpoint = "tcp://127.0.0.1:*";
  config.dataEndpoint = "tcp://127.0.0.1:*";
  config.insecure = true;
  config.stateDir = tempRoot + "/state";
  config.dataRoots = {tempRoot + "/data"};
  config.prepareTimeoutS = 1;
  std::filesystem::create_directories(config.dataRoots[0]);
  writeJobRecord(config.stateDir);
  theDaemon = new daemon::Daemon(config);
  std::atexit([] { std::filesystem::remove_all(tempRoot); });
  // The record must have loaded, or the job paths go unfuzzed.
  const std::string status = json{{"type", "status"}, {"job", kJob}}.dump();
  const auto reply = theDaemon->answer(zmq::message_t(status.data(), status.size()));
  FUZZ_REQUIRE(reply && json::parse(*reply).value("ok", false), "the seeded job did not load: " + reply.value_or(""));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<protocol::Envelope> envelope;
  try {
    envelope = protocol::parseRequest(data, size);
  } catch (const std::exception&) {  // answer() is under test here, not the parser
  }
  if (envelope && kStartsWork.count(protocol::typeName(envelope->request))) return 0;
  const auto reply = theDaemon->answer(zmq::message_t(data, size));
  FUZZ_REQUIRE(reply.has_value() != isStageReport(data, size), "only stage reports go unanswered");
  if (!reply) return 0;
  FUZZ_REQUIRE(json::accept(*reply), "the reply is not JSON: " + *reply);
  const json parsed = json::parse(*reply);
  FUZZ_REQUIRE(parsed.is_object() && parsed.contains("ok") && parsed["ok"].is_boolean(), *reply);
  if (envelope && envelope->id) FUZZ_REQUIRE(parsed.value("id", json()) == json(*envelope->id), *reply);
  return 0;
}
