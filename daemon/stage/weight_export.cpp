#include "daemon/stage/weight_export.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "daemon/ops/files.h"
#include "daemon/protocol/base64.h"
#include "daemon/stage/state/checkpoint.h"
#include "daemon/stage/stage_host.h"
#include "scheduler/error.h"
#include "stages/weights/safetensors.h"

namespace skytrain::daemon {
namespace {

constexpr std::string_view kParamPrefix = "param/";  // a checkpoint's parameters (runner_state.cpp)

std::string ownerPath(const std::string& jobDir, int stage) {
  return jobDir + "/stage-" + std::to_string(stage) + ".owner.json";
}

std::optional<int64_t> fileSize(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return static_cast<int64_t>(st.st_size);
}

// The parameters of the checkpoint after `step`, written once as their own file.
std::string checkpointExport(const std::string& jobDir, const std::string& job, int64_t step, int stage) {
  char name[64];
  std::snprintf(name, sizeof name, "/export/after-step-%08lld-stage-%d.safetensors", static_cast<long long>(step + 1), stage);
  const std::string path = jobDir + name;
  if (fileSize(path)) return path;
  if (findCheckpointDir(jobDir, step, stage).empty()) {
    throw Error("job " + job + " stage " + std::to_string(stage) + " has no checkpoint after step " +
                std::to_string(step + 1) + " on this daemon (only the newest few are kept)");
  }
  const StageSnapshot snapshot = loadCheckpoint(jobDir, job, step, stage);
  stages::SafeTensors out;
  for (const auto& [tensorName, tensor] : snapshot.tensors.tensors) {
    if (tensorName.rfind(kParamPrefix, 0) == 0) out.tensors.emplace_back(tensorName.substr(kParamPrefix.size()), tensor);
  }
  out.metadata = {{"format", "pt"}, {"skytrain_job", job}, {"skytrain_stage", std::to_string(stage)},
                  {"skytrain_step", std::to_string(step + 1)}};
  makeDirectories(jobDir + "/export");
  writeFileAtomic(path, stages::encodeSafetensors(out));
  return path;
}

// Refuses a prepare whose coordinator or owner differs from the record at `path`.
void checkClaim(const std::string& path, const std::string& job, const std::string& coordinatorKey,
                const std::string& ownerKey) {
  protocol::Json record;
  try {
    record = protocol::Json::parse(readFile(path, 4096), nullptr, false);
  } catch (const Error&) {
    record = nullptr;  // unreadable or over 4 KiB: not a record that can be honoured
  }
  if (!record.is_object()) throw Refusal("job " + job + ": its ownership record " + path + " is unreadable; refusing it");
  if (record.value("coordinator", std::string()) != coordinatorKey) {
    throw Refusal("job " + job + " was prepared here by another coordinator; only that daemon may prepare it");
  }
  if (record.value("owner", std::string()) != ownerKey) {
    throw Refusal("job " + job + " belongs to another owner here; a prepare cannot change who owns a job");
  }
}

}  // namespace

void claimJob(const std::string& jobRoot, const std::string& job, const std::string& coordinatorKey,
              const std::string& ownerKey, bool mayCreate) {
  const std::string path = jobRoot + "/owner.json";
  if (!fileSize(path)) {
    // A job prepared before owner.json existed: its stage records, if any, speak for it.
    bool known = false;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(jobRoot, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("stage-", 0) != 0 || name.size() < 11 || name.substr(name.size() - 11) != ".owner.json") continue;
      checkClaim(entry.path().string(), job, coordinatorKey, ownerKey);
      known = true;
    }
    if (!known && !mayCreate) {
      throw Refusal("job " + job + ": a prepare without a proof that the sender made the job, of a job not known here");
    }
    makeDirectories(jobRoot);
    writeFileAtomic(path, protocol::Json({{"coordinator", coordinatorKey}, {"owner", ownerKey}}).dump());
    return;
  }
  checkClaim(path, job, coordinatorKey, ownerKey);
}

void recordStageOwner(const std::string& jobDir, int stage, const std::string& coordinatorKey,
                      const std::string& ownerKey) {
  const protocol::Json record = {{"coordinator", coordinatorKey}, {"owner", ownerKey}};
  writeFileAtomic(ownerPath(jobDir, stage), record.dump());
}

std::string finalWeightsPath(const std::string& jobDir, int stage) {
  return jobDir + "/stage-" + std::to_string(stage) + ".safetensors";
}

protocol::Json readExportChunk(const std::string& stateDir, const protocol::ExportRead& request, const Caller& caller) {
  jobKey(request.job);  // 16 hex digits, or it throws: the id becomes a path
  // A copy after the first keeps its files apart (stage_host.cpp).
  const std::string jobDir = stateDir + "/jobs/" + request.job +
                             (request.replica > 0 ? "/replica-" + std::to_string(request.replica) : std::string());
  const std::string what = "job " + request.job + " stage " + std::to_string(request.stage) +
                           (request.replica > 0 ? " replica " + std::to_string(request.replica) : std::string());
  if (!fileSize(ownerPath(jobDir, request.stage))) throw Error(what + " was never hosted on this daemon");
  const auto record = protocol::Json::parse(readFile(ownerPath(jobDir, request.stage), 4096), nullptr, false);
  const std::string owner = record.is_object() ? record.value("owner", std::string()) : std::string();
  if (!caller.isAdmin() && (owner.empty() || caller.key != owner)) {
    throw Refusal("exporting the weights of " + what + " needs the admin role: " + caller.describe() +
                  " does not own the job");
  }
  std::string path;
  if (request.step < 0) {
    path = finalWeightsPath(jobDir, request.stage);
    if (!fileSize(path)) throw Error(what + " has no final weights on this daemon (the job has not finished)");
  } else {
    path = checkpointExport(jobDir, request.job, request.step, request.stage);
  }
  const int64_t size = *fileSize(path);
  if (request.offset > size) {
    throw Error("offset " + std::to_string(request.offset) + " is past the end of the " + std::to_string(size) +
                "-byte weights of " + what);
  }
  std::string chunk(static_cast<size_t>(std::min<int64_t>(protocol::kExportChunkBytes, size - request.offset)), '\0');
  std::ifstream in(path, std::ios::binary);
  in.seekg(request.offset);
  if (!in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()))) throw Error("cannot read " + path);
  return {{"ok", true}, {"size", size}, {"offset", request.offset}, {"data", protocol::base64Encode(chunk)}};
}

}  // namespace skytrain::daemon
