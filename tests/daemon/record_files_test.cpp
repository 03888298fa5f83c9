// Job records that no damage to one file can lose (daemon/jobs/record_files.h): each
// class of damage to record.json — gone, empty, cut at its first byte, in the middle, one
// byte short, a flipped byte, a changed value that still parses — is read from the previous
// generation; both generations damaged, the job is rebuilt from job.json with the
// checkpoints on disk; a cut step row costs that row only.
#include <catch2/catch.hpp>
#include <prometheus/metric_family.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <unistd.h>

#include "daemon/jobs/job_collector.h"
#include "daemon/jobs/job_metrics.h"
#include "daemon/jobs/job_table.h"
#include "daemon/jobs/record_files.h"
#include "daemon/jobs/report_aggregator.h"
#include "daemon/ops/files.h"
#include "spec_test_helpers.h"

using namespace skytrain;
using namespace skytrain::daemon;
namespace fs = std::filesystem;

namespace {

std::string readAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void writeAll(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("skytrain_record_files_" + std::to_string(::getpid()));
  Scratch() { fs::remove_all(dir); }
  ~Scratch() { fs::remove_all(dir); }
};

JobRecord sample() {
  JobRecord r;
  r.id = "0123456789abcdef";
  r.specText = testing::validSpec().dump();
  r.spec = protocol::parseJobSpec(r.specText);
  r.ownerKey = "owner-key";
  r.ownerName = "alice";
  r.stageKeys = {"", ""};
  r.proof = std::string(32, 'a');
  r.state = JobState::Running;
  r.createdAt = 1.5;
  return r;
}

}  // namespace

TEST_CASE("a damaged record.json is read from the previous generation, whatever the damage", "[records]") {
  Scratch scratch;
  RecordFiles files(scratch.dir.string());
  JobRecord r = sample();
  files.create(r);
  r.attempt = 2;
  r.checkpoints = {4, 9};
  files.save(r);  // generation 2: record.json; generation 1 (attempt 0): record.prev.json
  r.attempt = 3;
  files.save(r);  // generation 3; generation 2 aside
  for (const double loss : {5.5, 5.25}) {
    r.steps.push_back({{"step", r.steps.size()}, {"loss", loss}});
    files.appendStep(r, r.steps.back());
  }
  const fs::path dir = files.jobDir(r.id), record = dir / "record.json";
  const std::string good = readAll(record), previous = readAll(dir / "record.prev.json");

  std::string recovered;
  auto read = files.read(dir.string(), &recovered);
  REQUIRE(read);
  CHECK(recovered.empty());
  CHECK(read->attempt == 3);
  CHECK(read->steps.size() == 2);

  const std::vector<std::pair<std::string, std::function<std::string(std::string)>>> damages = {
      {"gone", [](std::string) { return std::string("<gone>"); }},
      {"empty", [](std::string) { return std::string(); }},
      {"cut after its first byte", [](std::string s) { return s.substr(0, 1); }},
      {"cut in the middle", [](std::string s) { return s.substr(0, s.size() / 2); }},
      {"one byte short", [](std::string s) { return s.substr(0, s.size() - 2); }},  // the last is a newline
      {"a flipped byte", [](std::string s) { s[s.size() / 3] ^= 0x20; return s; }},
      {"a changed value that parses", [](std::string s) {
         const auto at = s.find("\"attempt\": 3");
         REQUIRE(at != std::string::npos);
         s[at + 11] = '7';
         return s;
       }},
  };
  for (const auto& [name, damage] : damages) {
    INFO(name);
    const std::string bad = damage(good);
    if (bad == "<gone>") fs::remove(record);
    else writeAll(record, bad);
    recovered.clear();
    read = files.read(dir.string(), &recovered);
    REQUIRE(read);
    CHECK(read->attempt == 2);  // the generation before
    CHECK(read->checkpoints == std::vector<int64_t>{4, 9});
    CHECK(read->steps.size() == 2);
    CHECK_THAT(recovered, Catch::Contains("restored from the previous generation"));
    writeAll(record, good);
    writeAll(dir / "record.prev.json", previous);
  }
}

TEST_CASE("with both generations damaged the job is rebuilt from job.json and its checkpoints; a cut step row "
          "costs that row",
          "[records]") {
  Scratch scratch;
  RecordFiles files(scratch.dir.string());
  JobRecord r = sample();
  files.create(r);
  r.attempt = 1;
  files.save(r);
  const fs::path dir = files.jobDir(r.id);
  for (const char* step : {"step-00000004", "step-00000009"}) fs::create_directories(dir / "checkpoints" / step);
  r.steps.push_back({{"step", 0}, {"loss", 5.5}, {"attempt", 0}});
  files.appendStep(r, r.steps.back());
  r.steps.push_back({{"step", 1}, {"loss", 5.4}, {"attempt", 2}});
  files.appendStep(r, r.steps.back());
  std::ofstream(dir / "metrics.jsonl", std::ios::app) << "{\"step\": 2, \"lo";  // a crash mid-append
  writeAll(dir / "record.json", "{\"id\": ");
  fs::remove(dir / "record.prev.json");
  std::string recovered;
  const auto read = files.read(dir.string(), &recovered);
  REQUIRE(read);
  CHECK_THAT(recovered, Catch::Contains("rebuilt from job.json"));
  CHECK(read->id == r.id);
  CHECK(read->ownerKey == "owner-key");
  CHECK(read->proof == r.proof);
  CHECK(read->state == JobState::Preparing);  // unfinished: its coordinator resumes it
  CHECK(read->checkpoints == std::vector<int64_t>{3, 8});  // indices: the directories are named by number
  CHECK(read->steps.size() == 2);
  // The counter went with the record: the next attempt is past every one the rows name, and
  // past one that may have failed before its first step (it resumes as attempt 4)...
  CHECK(read->attempt == 3);
  // ...or past the one that began last, which <job>/attempt keeps apart from the record
  // (attempts that failed leave no rows: beginAttempt drops them).
  r.attempt = 7;
  files.markAttempt(r);
  CHECK(files.read(dir.string())->attempt == 7);  // it resumes as attempt 8
  writeAll(dir / "attempt", "garbage");
  CHECK(files.read(dir.string())->attempt == 3);
  // job.json damaged too: nothing is left to rebuild from, and the error says so.
  writeAll(dir / "job.json", "{}");
  CHECK_THROWS_WITH(files.read(dir.string()), Catch::Contains("job.json"));
  // A directory without any of the three files is not a job.
  fs::create_directories(scratch.dir / "jobs" / "not-a-job");
  CHECK_FALSE(files.read((scratch.dir / "jobs" / "not-a-job").string()));
}

TEST_CASE("a write that fails part-way leaves neither a partial file nor its .tmp, and the old file stands",
          "[records]") {
  Scratch scratch;
  fs::create_directories(scratch.dir);
  const std::string path = (scratch.dir / "record.json").string();
  writeFileAtomic(path, "old");
  CHECK_THROWS_WITH(writeFileAtomic(path,
                                    [](const ByteSink& sink) {
                                      sink("new, in part", 12);
                                      throw Error("No space left on device");  // as a full disk ends a write
                                    }),
                    Catch::Contains("No space left"));
  CHECK(readAll(path) == "old");
  CHECK_FALSE(fs::exists(path + ".tmp"));
}

TEST_CASE("a record write that fails (a full disk) costs neither the job nor the daemon: the next save makes it good",
          "[records]") {
  Scratch scratch;
  RecordFiles files(scratch.dir.string());
  JobRecord r = sample();
  files.create(r);
  const fs::path dir = files.jobDir(r.id);
  // An I/O error on every write: record.json's temporary file and metrics.jsonl cannot be made.
  fs::create_directories(dir / "record.json.tmp");
  fs::create_directories(dir / "metrics.jsonl");
  r.steps.push_back({{"step", 0}, {"loss", 5.5}});
  files.appendStep(r, r.steps.back());
  r.attempt = 4;
  CHECK_NOTHROW(files.save(r));
  CHECK_FALSE(fs::exists(dir / "record.json"));  // moved aside as the previous generation
  CHECK(files.read(dir.string())->attempt == 0);
  // Space again: the next change writes the record and every step row.
  fs::remove_all(dir / "record.json.tmp");
  fs::remove_all(dir / "metrics.jsonl");
  r.steps.push_back({{"step", 1}, {"loss", 5.25}});
  files.appendStep(r, r.steps.back());
  files.save(r);
  const auto read = files.read(dir.string());
  CHECK(read->attempt == 4);
  CHECK(read->steps.size() == 2);
}

TEST_CASE("a finished job's series leave /metrics after the retention; it still counts in skytrain_jobs",
          "[records][metrics]") {
  Scratch scratch;
  RecordFiles files(scratch.dir.string());
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  JobRecord old = sample(), recent = sample(), running = sample();
  old.id = "00000000000000a1", recent.id = "00000000000000a2", running.id = "00000000000000a3";
  old.state = recent.state = JobState::Succeeded;
  old.finishedAt = now - 2 * 86400;
  recent.finishedAt = now - 60;
  for (auto* r : {&old, &recent, &running}) files.create(*r), files.save(*r);
  JobTable table(scratch.dir.string(), "self-key");
  table.load();
  auto seriesOf = [&](double retentionS) {
    std::set<std::string> jobs;
    double counted = 0;
    for (const auto& family : JobCollector(table, retentionS).Collect()) {
      for (const auto& metric : family.metric) {
        if (family.name == "skytrain_jobs") counted += metric.gauge.value;
        for (const auto& label : metric.label) {
          if (label.name == "job_id") jobs.insert(label.value);
        }
      }
    }
    CHECK(counted == 3);
    return jobs;
  };
  CHECK(seriesOf(86400) == std::set<std::string>{recent.id, running.id});
  CHECK(seriesOf(0) == std::set<std::string>{old.id, recent.id, running.id});  // 0: kept forever
}

TEST_CASE("the last step's code shares and sender's losses are a series a cut; a malformed one adds none",
          "[records][metrics]") {
  Scratch scratch;
  RecordFiles files(scratch.dir.string());
  JobRecord r = sample();
  files.create(r);
  r.steps.push_back({{"step", 0}, {"loss", 5.5}, {"code_share", "high"}, {"sender_loss", "low"}});
  CHECK(jobMetrics(r, 0).codeShares.empty());
  CHECK(jobMetrics(r, 0).senderLosses.empty());
  r.steps.push_back({{"step", 1}, {"loss", 5.25}, {"code_share", {{"2", "x"}, {"4", 0.5}}}});
  CHECK(jobMetrics(r, 0).codeShares == std::map<std::string, double>{{"4", 0.5}});
  r.steps.push_back({{"step", 2},
                     {"loss", 5.0},
                     {"code_share", {{"2", 0.25}, {"4", 0.001}}},
                     {"sender_loss", {{"2", 5.5}, {"4", nullptr}}}});
  CHECK(jobMetrics(r, 0).codeShares == std::map<std::string, double>{{"2", 0.25}, {"4", 0.001}});
  CHECK(jobMetrics(r, 0).senderLosses == std::map<std::string, double>{{"2", 5.5}});
  for (const auto& step : r.steps) files.appendStep(r, step);
  files.save(r);
  JobTable table(scratch.dir.string(), "self-key");
  table.load();
  std::map<std::string, std::map<std::string, double>> series;  // by family, then cut
  for (const auto& family : JobCollector(table, 0).Collect()) {
    if (family.name != "skytrain_job_code_share" && family.name != "skytrain_job_sender_loss") continue;
    for (const auto& metric : family.metric) {
      for (const auto& label : metric.label) {
        if (label.name == "cut") series[family.name][label.value] = metric.gauge.value;
      }
    }
  }
  CHECK(series["skytrain_job_code_share"] == std::map<std::string, double>{{"2", 0.25}, {"4", 0.001}});
  CHECK(series["skytrain_job_sender_loss"] == std::map<std::string, double>{{"2", 5.5}});
}

TEST_CASE("a step row keeps each stage's share of the code at its own input and sender's loss at its end only",
          "[records][metrics]") {
  Scratch scratch;
  RecordFiles files(scratch.dir.string());
  ReportAggregator aggregator(files);
  JobRecord r = sample();  // two stages, the second from layer 2
  files.create(r);
  auto step = [&](int stage, std::map<int, double> shares, std::map<int, double> senders = {}) {
    protocol::StageReport report;
    report.job = r.id;
    report.stage = stage;
    report.kind = protocol::ReportKind::Step;
    report.step = static_cast<int64_t>(r.steps.size());
    report.codeShares = std::move(shares);
    report.senderLosses = std::move(senders);
    aggregator.apply(r, report);
  };
  step(0, {{2, 0.9}}, {{2, 4.5}, {1, 9.0}});  // decodes no code: dropped; sends at 2 only: 1 dropped
  step(1, {{2, 0.3}, {3, 0.5}}, {{2, 7.0}});  // layer 3 is no cut of this job; the last stage sends none
  REQUIRE(r.steps.size() == 1);
  CHECK(r.steps[0]["code_share"] == nlohmann::json{{"2", 0.3}});
  CHECK(r.steps[0]["sender_loss"] == nlohmann::json{{"2", 4.5}});
  step(0, {});
  step(1, {});
  REQUIRE(r.steps.size() == 2);
  CHECK_FALSE(r.steps[1].contains("code_share"));
  CHECK_FALSE(r.steps[1].contains("sender_loss"));
}

TEST_CASE("a healed job's record names the copies that hold its final weights, and export is sent there",
          "[records]") {
  JobRecord r = sample();
  nlohmann::json spec = testing::validSpec();
  spec["stages"][0]["replicas"] = {{{"daemon", "tcp://10.0.0.2:7100"}}};
  spec["stages"][1]["replicas"] = {{{"daemon", "tcp://10.0.0.3:7100"}}};
  r.specText = spec.dump();
  r.spec = protocol::parseJobSpec(r.specText);
  r.stageKeys = {"k0", "k1", "k2", "k3"};  // slots: stage 0 and 1 of pipeline 0, then of pipeline 1
  CHECK_FALSE(r.status(0)["stage_daemons"][0].contains("replica"));  // pipeline 0's, by default

  r.weightsPipeline = 1;  // pipeline 0 left and did not come back
  const JobRecord back = JobRecord::fromDocument(r.document());
  CHECK(back.weightsPipeline == 1);
  const auto daemons = back.status(0)["stage_daemons"];
  CHECK(daemons[0] == nlohmann::json{{"endpoint", "tcp://10.0.0.2:7100"}, {"key", "k2"}, {"replica", 1}});
  CHECK(daemons[1] == nlohmann::json{{"endpoint", "tcp://10.0.0.3:7100"}, {"key", "k3"}, {"replica", 1}});

  // A record that names a pipeline the job does not have reads as pipeline 0's.
  auto crafted = r.document();
  crafted["weights_pipeline"] = 7;
  CHECK(JobRecord::fromDocument(crafted).weightsPipeline == 0);
  crafted["weights_pipeline"] = -1;
  CHECK(JobRecord::fromDocument(crafted).weightsPipeline == 0);
}
