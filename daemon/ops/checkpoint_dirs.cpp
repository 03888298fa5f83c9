#include "daemon/ops/checkpoint_dirs.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "daemon/ops/files.h"

namespace skytrain::daemon {
namespace {

std::string stepDirName(int64_t number) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(number));
  return name;
}

// A stage's checkpoint JSON names the format that named its directory; unreadable: -1.
int formatOf(const std::string& metaPath) {
  try {
    const auto meta = nlohmann::json::parse(readFile(metaPath, kMaxCheckpointMetaBytes), nullptr, false);
    return meta.is_object() ? meta.value("format", -1) : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

std::string checkpointDir(const std::string& jobDir, int64_t step) {
  return jobDir + "/checkpoints/" + stepDirName(step + 1);
}

std::string checkpointTensorsPath(const std::string& jobDir, int64_t step, int stage) {
  return checkpointDir(jobDir, step) + "/stage-" + std::to_string(stage) + ".safetensors";
}

std::string checkpointMetaPath(const std::string& jobDir, int64_t step, int stage) {
  return checkpointDir(jobDir, step) + "/stage-" + std::to_string(stage) + ".json";
}

std::string findCheckpointDir(const std::string& jobDir, int64_t step, int stage) {
  const std::string file = "/stage-" + std::to_string(stage) + ".json";
  std::error_code ec;
  if (const std::string dir = checkpointDir(jobDir, step); std::filesystem::is_regular_file(dir + file, ec)) {
    if (formatOf(dir + file) != kIndexNamedCheckpointFormat) return dir;
  }
  if (const std::string old = jobDir + "/checkpoints/" + stepDirName(step); std::filesystem::is_regular_file(old + file, ec)) {
    if (formatOf(old + file) == kIndexNamedCheckpointFormat) return old;
  }
  return "";
}

int64_t checkpointStepOf(const std::string& dir) {
  const std::string name = std::filesystem::path(dir).filename().string();
  if (name.size() != 13 || name.rfind("step-", 0) != 0 || name.find_first_not_of("0123456789", 5) != std::string::npos) {
    return -1;
  }
  const int64_t number = std::strtoll(name.c_str() + 5, nullptr, 10);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind("stage-", 0) != 0 || entry.path().extension() != ".json" || !entry.is_regular_file(ec)) continue;
    if (formatOf(entry.path().string()) == kIndexNamedCheckpointFormat) return number;
    break;
  }
  return number - 1;
}

}  // namespace skytrain::daemon
