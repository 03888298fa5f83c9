#include "daemon/stage/state/checkpoint.h"

#include <spdlog/spdlog.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "daemon/ops/files.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

constexpr size_t kMaxTensorsBytes = size_t{1} << 40;

constexpr int kWriterNice = 19;  // where SCHED_IDLE is refused
// Checkpoints newer than the complete one a stage keeps while none of them completes.
constexpr size_t kMaxUnconfirmed = 8;

std::string hex64(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

std::string readAll(const std::string& path, size_t maxBytes) {
  try {
    return readFile(path, maxBytes);
  } catch (const Error& e) {
    throw WireError(std::string("checkpoint file ") + e.what());
  }
}

}  // namespace

StageSnapshot loadCheckpoint(const std::string& jobDir, const std::string& jobId, int64_t step, int stage) {
  std::string dir = findCheckpointDir(jobDir, step, stage);
  if (dir.empty()) dir = checkpointDir(jobDir, step);  // missing: the error names the file it would be
  const std::string metaPath = dir + "/stage-" + std::to_string(stage) + ".json";
  const std::string tensorsPath = dir + "/stage-" + std::to_string(stage) + ".safetensors";
  const std::string metaText = readAll(metaPath, kMaxCheckpointMetaBytes);
  return decodeSnapshot(metaText, std::make_shared<const std::string>(readAll(tensorsPath, kMaxTensorsBytes)), jobId,
                        step, stage, "checkpoint file " + metaPath, "checkpoint file " + tensorsPath);
}

StageSnapshot decodeSnapshot(const std::string& metaText, std::shared_ptr<const std::string> bytes,
                             const std::string& jobId, int64_t step, int stage, const std::string& metaName,
                             const std::string& tensorsName) {
  StageSnapshot snapshot;
  snapshot.meta = nlohmann::json::parse(metaText, nullptr, false);
  const auto& m = snapshot.meta;
  auto problem = [&](const std::string& what) { throw WireError(metaName + ": " + what); };
  if (m.is_discarded() || !m.is_object()) problem("not a JSON object");
  const int format = m.value("format", 0);
  if (format != kCheckpointFormat && format != kIndexNamedCheckpointFormat) {
    problem("format " + std::to_string(format) + " is not " + std::to_string(kCheckpointFormat) + " (or 1)");
  }
  if (m.value("job", "") != jobId) problem("belongs to job " + m.value("job", std::string("?")) + ", not " + jobId);
  if (m.value("stage", -1) != stage) problem("belongs to stage " + std::to_string(m.value("stage", -1)));
  if (m.value("step", int64_t{-1}) != step) problem("is of step " + std::to_string(m.value("step", int64_t{-1}) + 1));
  if (!m.contains("plan") || !m["plan"].is_object()) problem("has no plan");
  if (m.value("tensors_bytes", uint64_t{0}) != bytes->size()) {
    throw WireError(tensorsName + " is " + std::to_string(bytes->size()) + " bytes, " + metaName + " says " +
                    std::to_string(m.value("tensors_bytes", uint64_t{0})) + " (truncated?)");
  }
  if (m.value("tensors_xxh64", "") != hex64(XXH64(bytes->data(), bytes->size(), 0))) {
    throw WireError(tensorsName + " does not match its checksum in " + metaName + " (corrupted)");
  }
  snapshot.tensors = stages::decodeSafetensors(bytes, tensorsName);  // views into the bytes' one copy
  return snapshot;
}

SnapshotBytes encodeSnapshot(StageSnapshot snapshot) {
  SnapshotBytes out;
  stages::writeSafetensors(std::move(snapshot.tensors), [&](const char* data, size_t n) { out.tensors.append(data, n); });
  nlohmann::json meta = std::move(snapshot.meta);
  meta["tensors_bytes"] = out.tensors.size();
  meta["tensors_xxh64"] = hex64(XXH64(out.tensors.data(), out.tensors.size(), 0));
  out.meta = meta.dump();
  return out;
}

CheckpointWriter::CheckpointWriter(std::string jobDir, int stage, int keep, std::function<int64_t()> complete)
    : jobDir_(std::move(jobDir)), stage_(stage), keep_(keep), complete_(std::move(complete)) {
  // Checkpoints of earlier attempts count towards `keep`.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(jobDir_ + "/checkpoints", ec)) {
    const std::string dir = entry.path().string();
    const int64_t step = checkpointStepOf(dir);
    if (step >= 0 && std::filesystem::exists(dir + "/stage-" + std::to_string(stage_) + ".json", ec)) {
      kept_.emplace_back(step, dir);
    }
  }
  std::sort(kept_.begin(), kept_.end());
  thread_ = std::thread([this] { run(); });
}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void CheckpointWriter::write(int64_t step, StageSnapshot snapshot) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (snapshot.borrowed) ++borrowing_;
    queue_.emplace_back(step, std::move(snapshot));
  }
  changed_.notify_all();
}

std::vector<int64_t> CheckpointWriter::takeWritten() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(written_, {});
}

std::vector<std::pair<int64_t, std::string>> CheckpointWriter::takeFailed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(failed_, {});
}

void CheckpointWriter::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

void CheckpointWriter::awaitReleased() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return borrowing_ == 0; });
}

void CheckpointWriter::run() {
  // Only in the time the stage's compute leaves (SCHED_IDLE: a core no compute thread
  // wants — the pipeline's bubbles, the waits for frames): the steps after a checkpoint keep
  // their pace. It cannot starve: the next optimizer step waits for it, which idles a core.
  const sched_param none{};
  if (::sched_setscheduler(static_cast<pid_t>(::syscall(SYS_gettid)), SCHED_IDLE, &none) != 0 &&
      ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), kWriterNice) != 0) {
    spdlog::warn("checkpoint writer: cannot lower its priority: {}", std::strerror(errno));
  }
  while (true) {
    std::pair<int64_t, StageSnapshot> item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    std::optional<std::string> failure;
    bool borrowing = item.second.borrowed;
    auto release = [&] {
      if (!borrowing) return;
      borrowing = false;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --borrowing_;
      }
      changed_.notify_all();
    };
    try {
      const int64_t step = item.first;
      StageSnapshot& snapshot = item.second;  // not a structured binding: the lambdas below capture it
      makeDirectories(checkpointDir(jobDir_, step));
      // Streamed from the snapshot's tensors to the file, each freed once written: the
      // checkpoint is never held a second time as one buffer of bytes.
      std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> hash(XXH64_createState(), &XXH64_freeState);
      XXH64_reset(hash.get(), 0);
      uint64_t size = 0;
      writeFileAtomic(checkpointTensorsPath(jobDir_, step, stage_), [&](const ByteSink& sink) {
        stages::writeSafetensors(std::move(snapshot.tensors), [&](const char* data, size_t n) {
          XXH64_update(hash.get(), data, n);
          size += n;
          sink(data, n);
        });
        release();  // every byte read: the stage may update its tensors while this syncs
      });
      nlohmann::json meta = snapshot.meta;
      meta["tensors_bytes"] = size;
      meta["tensors_xxh64"] = hex64(XXH64_digest(hash.get()));
      writeFileAtomic(checkpointMetaPath(jobDir_, step, stage_), meta.dump(2));
      prune(step);
      std::lock_guard<std::mutex> lock(mutex_);
      written_.push_back(step);
    } catch (const std::exception& e) {
      failure = e.what();
      std::error_code ec;  // no part of this step's checkpoint stays behind
      std::filesystem::remove(checkpointMetaPath(jobDir_, item.first, stage_), ec);
      std::filesystem::remove(checkpointTensorsPath(jobDir_, item.first, stage_), ec);
      std::filesystem::remove(checkpointDir(jobDir_, item.first), ec);  // only when empty
    }
    release();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = false;
      if (failure) failed_.emplace_back(item.first, *failure);
    }
    changed_.notify_all();
  }
}

void CheckpointWriter::prune(int64_t newest) {
  // A step written again (an attempt that resumed from an older checkpoint) is one entry.
  kept_.erase(std::remove_if(kept_.begin(), kept_.end(), [&](const auto& k) { return k.first == newest; }), kept_.end());
  kept_.emplace_back(newest, checkpointDir(jobDir_, newest));
  std::sort(kept_.begin(), kept_.end());
  const bool told = static_cast<bool>(complete_);
  const int64_t complete = told ? complete_() : -1;
  // Stay: the newest keep + 1; and, when the coordinator names the complete checkpoint, that
  // one and every newer one (each may be the next complete; the heartbeat naming it comes
  // later), up to kMaxUnconfirmed of them while no newer one completes (another stage whose
  // writes keep failing must not fill this disk too).
  size_t newer = 0;
  for (const auto& k : kept_) newer += told && k.first > complete;
  std::vector<std::pair<int64_t, std::string>> staying;
  for (size_t i = 0; i < kept_.size(); ++i) {
    const int64_t step = kept_[i].first;
    const bool recent = i + static_cast<size_t>(keep_) + 1 >= kept_.size();
    const bool pending = told && step > complete && newer <= kMaxUnconfirmed;
    if (step > complete && told && newer > kMaxUnconfirmed) --newer;  // the oldest unconfirmed go first
    if (recent || pending || (told && step == complete)) {
      staying.push_back(kept_[i]);
      continue;
    }
    const std::string file = kept_[i].second + "/stage-" + std::to_string(stage_);
    std::error_code ec;
    std::filesystem::remove(file + ".json", ec);  // the JSON first: then it is gone
    std::filesystem::remove(file + ".safetensors", ec);
    std::filesystem::remove(kept_[i].second, ec);  // only when empty (other stages' files)
  }
  kept_ = std::move(staying);
}

}  // namespace skytrain::daemon
