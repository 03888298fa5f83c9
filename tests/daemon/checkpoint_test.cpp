// Checkpoints (daemon/stage/state/checkpoint.h): a stage's snapshot restores exactly, and a truncated,
// corrupted or mismatched checkpoint is refused naming the file and the problem.
#include <catch2/catch.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <thread>
#include <fstream>
#include <nlohmann/json.hpp>

#include "daemon/stage/state/checkpoint.h"
#include "daemon/stage/runner/pipeline_runner.h"
#include "daemon/stage/stage_worker.h"
#include "scheduler/error.h"

using namespace skytrain;
namespace fs = std::filesystem;

namespace {

protocol::JobSpec middleStage(int dModel, const std::string& forward = "ef(fp16+svd:0.5)") {
  const nlohmann::json spec = {
      {"steps", 4}, {"batch_size", 2}, {"micro_batches", 1}, {"schedule", "1f1b"},
      {"model", {{"d_model", dModel}, {"heads", 2}, {"layers", 3}, {"d_ff", 32}, {"seq_len", 8}}},
      {"compression", {{"forward", forward}, {"backward", "ef(int8)"}}},
      {"data", {{"files", {"/nonexistent"}}}},
      {"stages", {{{"daemon", "tcp://a:1"}, {"layers", {0, 1}}}, {{"daemon", "tcp://b:1"}, {"layers", {1, 2}}},
                  {{"daemon", "tcp://c:1"}, {"layers", {2, 3}}}}}};
  return protocol::parseJobSpec(spec.dump());
}

struct ScratchJob {
  std::string dir = (fs::temp_directory_path() / ("skytrain_ckpt_" + std::to_string(::getpid()))).string();
  ScratchJob() { fs::remove_all(dir); }
  ~ScratchJob() { fs::remove_all(dir); }
};

const std::string kJob = "00000000000000cc";


std::string loadError(const std::string& dir, int64_t step, int stage, const std::string& job = kJob) {
  try {
    daemon::loadCheckpoint(dir, job, step, stage);
  } catch (const WireError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a checkpoint written in the background reads back to the same tensors and plan") {
  ScratchJob job;
  daemon::PipelineRunner runner(middleStage(16), 1, 7, 1e9);
  // (Codec state after real steps — error-feedback residuals, SVD generators — is covered end
  // to end by tests/integration/chaos_test.sh, whose resumed ef runs end bit-identical.)
  const daemon::StageSnapshot snapshot = runner.snapshot(kJob, 3);
  {
    daemon::CheckpointWriter writer(job.dir, 1, 2);
    writer.write(3, snapshot);
    writer.drain();
    CHECK(writer.takeWritten() == std::vector<int64_t>{3});
  }
  const daemon::StageSnapshot loaded = daemon::loadCheckpoint(job.dir, kJob, 3, 1);
  REQUIRE(loaded.tensors.tensors.size() == snapshot.tensors.tensors.size());
  for (size_t i = 0; i < loaded.tensors.tensors.size(); ++i) {
    CHECK(loaded.tensors.tensors[i].first == snapshot.tensors.tensors[i].first);
    CHECK(torch::equal(loaded.tensors.tensors[i].second, snapshot.tensors.tensors[i].second));
  }
  CHECK(loaded.meta["plan"]["micro_batches"] == 1);
  // Restored into a fresh runner, the snapshot is taken again unchanged.
  daemon::PipelineRunner fresh(middleStage(16), 1, 7, 1e9);
  fresh.restore(loaded);
  const daemon::StageSnapshot again = fresh.snapshot(kJob, 3);
  for (size_t i = 0; i < again.tensors.tensors.size(); ++i) {
    INFO(again.tensors.tensors[i].first);
    CHECK(torch::equal(again.tensors.tensors[i].second, snapshot.tensors.tensors[i].second));
  }
}

TEST_CASE("a healing job's state crosses as bytes, checked like a checkpoint's files") {
  daemon::PipelineRunner runner(middleStage(16), 1, 7, 1e9);
  const daemon::StageSnapshot snapshot = runner.snapshot(kJob, 3);
  daemon::SnapshotBytes bytes = daemon::encodeSnapshot(snapshot);
  auto decode = [&](const std::string& meta, const std::string& tensors, int64_t step = 3, int stage = 1) {
    return daemon::decodeSnapshot(meta, std::make_shared<const std::string>(tensors), kJob, step, stage, "the meta",
                                  "the tensors");
  };
  const daemon::StageSnapshot back = decode(bytes.meta, bytes.tensors);
  REQUIRE(back.tensors.tensors.size() == snapshot.tensors.tensors.size());
  for (size_t i = 0; i < back.tensors.tensors.size(); ++i) {
    CHECK(torch::equal(back.tensors.tensors[i].second, snapshot.tensors.tensors[i].second));
  }
  daemon::PipelineRunner joiner(middleStage(16), 1, 7, 1e9);
  joiner.restore(back);
  // Crafted or damaged: every problem is named, nothing is restored.
  std::string flipped = bytes.tensors;
  flipped[flipped.size() / 2] ^= 1;
  CHECK_THROWS_WITH(decode(bytes.meta, flipped), Catch::Contains("does not match its checksum"));
  CHECK_THROWS_WITH(decode(bytes.meta, bytes.tensors.substr(0, 100)), Catch::Contains("truncated"));
  CHECK_THROWS_WITH(decode(bytes.meta, bytes.tensors, 4), Catch::Contains("is of step 4"));
  CHECK_THROWS_WITH(decode(bytes.meta, bytes.tensors, 3, 2), Catch::Contains("belongs to stage 1"));
  CHECK_THROWS_WITH(decode("{not json", bytes.tensors), Catch::Contains("not a JSON object"));
}

TEST_CASE("a stopped copy's kept state goes to the next attempt once, of its step only") {
  daemon::PipelineRunner runner(middleStage(16), 1, 7, 1e9);
  auto never = [] { return false; };
  std::string missing;
  SECTION("taken once, of the step it was kept after") {
    daemon::KeptState kept;
    kept.deposit(5, runner.snapshot(kJob, 5));
    CHECK(kept.take(5, std::chrono::seconds(1), never, missing));
    CHECK_FALSE(kept.take(5, std::chrono::seconds(1), never, missing));  // gone: taken
    daemon::KeptState other;
    other.deposit(5, runner.snapshot(kJob, 5));
    CHECK_FALSE(other.take(6, std::chrono::seconds(1), never, missing));
    CHECK_THAT(missing, Catch::Contains("after step 6, not 7"));
    CHECK_FALSE(other.take(5, std::chrono::seconds(1), never, missing));  // freed: no attempt holds it
  }
  SECTION("the next attempt waits for the copy to stop") {
    daemon::KeptState kept;
    std::thread stopping([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      kept.deposit(5, runner.snapshot(kJob, 5));
    });
    CHECK(kept.take(5, std::chrono::seconds(10), never, missing));
    stopping.join();
    daemon::KeptState late;
    CHECK_FALSE(late.take(5, std::chrono::milliseconds(100), never, missing));
    CHECK_THAT(missing, Catch::Contains("did not stop"));
    CHECK_THROWS_AS(late.take(5, std::chrono::seconds(10), [] { return true; }, missing), daemon::Aborted);
  }
  SECTION("freed when no attempt takes it in time; a copy that finished keeps nothing") {
    daemon::KeptState kept;
    kept.deposit(5, runner.snapshot(kJob, 5));
    CHECK_FALSE(kept.expire(std::chrono::steady_clock::now() - std::chrono::hours(1)));
    CHECK(kept.expire(std::chrono::steady_clock::now() + std::chrono::seconds(1)));
    CHECK_FALSE(kept.take(5, std::chrono::seconds(1), never, missing));
    daemon::KeptState finished;
    finished.deposit(5, std::nullopt);
    CHECK_FALSE(finished.take(5, std::chrono::seconds(1), never, missing));
    CHECK_THAT(missing, Catch::Contains("kept none"));
  }
}

TEST_CASE("a snapshot borrows the weights: no copy, and the update waits until they are written") {
  ScratchJob job;
  daemon::PipelineRunner runner(middleStage(16), 1, 7, 1e9);
  daemon::StageSnapshot snapshot = runner.snapshot(kJob, 3);
  CHECK(snapshot.borrowed);
  // The snapshot's parameters are the stage's own storage, not copies.
  const auto live = runner.weights().tensors;
  REQUIRE(!live.empty());
  bool shares = false;
  for (const auto& [name, tensor] : snapshot.tensors.tensors) {
    if (name == "param/" + live.front().first) shares = tensor.data_ptr() == live.front().second.data_ptr();
  }
  CHECK(shares);
  std::vector<at::Tensor> before;
  for (const auto& [name, tensor] : live) before.push_back(tensor.clone());
  {
    daemon::CheckpointWriter writer(job.dir, 1, 2);
    writer.write(3, std::move(snapshot));
    writer.awaitReleased();  // what the optimizer step waits for
    torch::NoGradGuard noGrad;
    for (const auto& [name, tensor] : live) tensor.add_(1.0);  // the update, right after
    writer.drain();
  }
  const daemon::StageSnapshot loaded = daemon::loadCheckpoint(job.dir, kJob, 3, 1);
  for (size_t i = 0; i < live.size(); ++i) {
    INFO(live[i].first);
    bool found = false;
    for (const auto& [name, tensor] : loaded.tensors.tensors) {
      if (name != "param/" + live[i].first) continue;
      found = true;
      CHECK(torch::equal(tensor, before[i]));  // as they were when the snapshot was taken
    }
    CHECK(found);
  }
}

TEST_CASE("the writer keeps the newest keep + 1 checkpoints of its stage") {
  ScratchJob job;
  daemon::PipelineRunner runner(middleStage(16), 1, 7, 1e9);
  {
    daemon::CheckpointWriter writer(job.dir, 1, 2);
    for (int64_t step : {4, 9, 14, 19, 24}) writer.write(step, runner.snapshot(kJob, step));
    writer.drain();
  }
  CHECK_FALSE(fs::exists(daemon::checkpointDir(job.dir, 4)));
  CHECK_FALSE(fs::exists(daemon::checkpointDir(job.dir, 9)));
  CHECK(fs::exists(daemon::checkpointMetaPath(job.dir, 14, 1)));
  CHECK(fs::exists(daemon::checkpointMetaPath(job.dir, 24, 1)));
}

TEST_CASE("the writer keeps the newest checkpoint every stage confirmed, however old, and what may follow it") {
  // Another stage could not write steps 9-29 (a full disk): step 4 is what a restart resumes
  // from, and this stage must not prune it, nor the newer ones, any of which may be confirmed
  // next (the heartbeat naming it comes later).
  ScratchJob job;
  daemon::PipelineRunner runner(middleStage(16), 1, 7, 1e9);
  {
    daemon::CheckpointWriter writer(job.dir, 1, 2, [] { return int64_t{4}; });
    for (int64_t step : {4, 9, 14, 19, 24, 29}) writer.write(step, runner.snapshot(kJob, step));
    writer.drain();
  }
  for (int64_t step : {4, 9, 14, 19, 24, 29}) CHECK(fs::exists(daemon::checkpointMetaPath(job.dir, step, 1)));
  // Once 29 is complete, what is older than it and not among the newest keep + 1 goes.
  {
    daemon::CheckpointWriter writer(job.dir, 1, 2, [] { return int64_t{29}; });
    writer.write(34, runner.snapshot(kJob, 34));
    writer.drain();
  }
  for (int64_t step : {4, 9, 14, 19}) CHECK_FALSE(fs::exists(daemon::checkpointDir(job.dir, step)));
  for (int64_t step : {24, 29, 34}) CHECK(fs::exists(daemon::checkpointMetaPath(job.dir, step, 1)));
}

TEST_CASE("an attempt that resumes from an older checkpoint keeps the steps it writes again") {
  // keep 1; this stage has 20 (complete), 30 and 40 on disk; the job resumes from 20 and
  // writes 30 and 40 again: each must be on disk after its write.
  ScratchJob job;
  daemon::PipelineRunner runner(middleStage(16), 1, 7, 1e9);
  {
    daemon::CheckpointWriter writer(job.dir, 1, 1, [] { return int64_t{20}; });
    for (int64_t step : {20, 30, 40}) writer.write(step, runner.snapshot(kJob, step));
    writer.drain();
  }
  daemon::CheckpointWriter writer(job.dir, 1, 1, [] { return int64_t{20}; });
  for (int64_t step : {30, 40}) {
    writer.write(step, runner.snapshot(kJob, step));
    writer.drain();
    CHECK(fs::exists(daemon::checkpointMetaPath(job.dir, step, 1)));
    CHECK(fs::exists(daemon::checkpointTensorsPath(job.dir, step, 1)));
  }
  CHECK(fs::exists(daemon::checkpointMetaPath(job.dir, 20, 1)));
}

TEST_CASE("bad checkpoints are refused naming the file and the problem") {
  ScratchJob job;
  daemon::PipelineRunner runner(middleStage(16), 1, 7, 1e9);
  {
    daemon::CheckpointWriter writer(job.dir, 1, 5);
    writer.write(3, runner.snapshot(kJob, 3));
    writer.drain();
  }
  const std::string tensors = daemon::checkpointTensorsPath(job.dir, 3, 1);
  CHECK_THAT(loadError(job.dir, 3, 1, "00000000000000dd"), Catch::Contains("belongs to job 00000000000000cc"));
  CHECK_THAT(loadError(job.dir, 3, 2), Catch::Contains("stage-2.json is missing"));
  CHECK_THAT(loadError(job.dir, 8, 1), Catch::Contains("is missing"));
  fs::copy_file(daemon::checkpointMetaPath(job.dir, 3, 1), job.dir + "/meta.json");
  fs::copy_file(tensors, job.dir + "/tensors");
  SECTION("truncated") {
    fs::resize_file(tensors, fs::file_size(tensors) - 10);
    CHECK_THAT(loadError(job.dir, 3, 1), Catch::Contains(tensors) && Catch::Contains("truncated"));
  }
  SECTION("corrupted") {
    std::fstream f(tensors, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
    f.close();
    CHECK_THAT(loadError(job.dir, 3, 1), Catch::Contains(tensors) && Catch::Contains("does not match its checksum"));
  }
  SECTION("a checkpoint of another model does not restore") {
    daemon::PipelineRunner other(middleStage(32), 1, 7, 1e9);
    try {
      other.restore(daemon::loadCheckpoint(job.dir, kJob, 3, 1));
      FAIL("restored a checkpoint of another model");
    } catch (const WireError& e) {
      CHECK_THAT(e.what(), Catch::Contains("has shape [") && Catch::Contains("this stage's is"));
    }
  }
  SECTION("a checkpoint of other codecs does not restore") {
    daemon::PipelineRunner other(middleStage(16, "int8"), 1, 7, 1e9);
    CHECK_THROWS_WITH(other.restore(daemon::loadCheckpoint(job.dir, kJob, 3, 1)), Catch::Contains("other layers, seed or codecs"));
  }
}
