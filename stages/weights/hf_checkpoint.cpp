#include "stages/weights/hf_checkpoint.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compression/wire/safetensors_header.h"
#include "scheduler/error.h"

namespace skytrain::stages {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxConfigBytes = 1 << 20;
constexpr uint64_t kMaxIndexBytes = 64 << 20;
constexpr size_t kMaxShards = 65536;
constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kSingle = "model.safetensors";

at::ScalarType typeOf(const std::string& dtype) {
  if (dtype == "F32") return at::kFloat;
  if (dtype == "F16") return at::kHalf;
  if (dtype == "BF16") return at::kBFloat16;
  if (dtype == "I64") return at::kLong;
  if (dtype == "I32") return at::kInt;
  if (dtype == "I8") return at::kChar;
  return at::kByte;  // "U8": the header check admits no other
}

// Reads [offset, offset + size) of `path` into `into`; throws naming the file.
void readAt(const std::string& path, uint64_t offset, uint64_t size, char* into) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open " + path + ": " + std::strerror(errno));
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, into + done, size - done, static_cast<off_t>(offset + done));
    if (n <= 0) {
      const std::string why = n == 0 ? "the file is shorter than its header says" : std::strerror(errno);
      ::close(fd);
      throw Error("cannot read " + path + ": " + why);
    }
    done += static_cast<uint64_t>(n);
  }
  ::close(fd);
}

std::string readSmall(const std::string& path, uint64_t limit) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) throw Error("cannot read " + path + ": " + ec.message());
  if (size > limit) throw WireError(path + " is " + std::to_string(size) + " bytes, over the " + std::to_string(limit) + " allowed");
  std::string text(size, '\0');
  readAt(path, 0, size, text.data());
  return text;
}

}  // namespace

bool HfCheckpoint::isModelDirectory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec);
}

std::string HfCheckpoint::member(const std::string& name) const {
  if (name.empty() || name.size() > 255 || name.find('/') != std::string::npos || name == "." || name == ".." ||
      name.find('\0') != std::string::npos) {
    throw WireError(dir_ + ": \"" + name.substr(0, 64) + "\" is not a file name in the directory");
  }
  std::error_code ec;
  const fs::path real = fs::canonical(fs::path(dir_) / name, ec);
  if (ec) throw Error(dir_ + ": " + name + " cannot be read: " + ec.message());
  if (real.parent_path() != fs::path(dir_)) {
    throw Error(dir_ + ": " + name + " leads outside the directory (to " + real.string() + ")");
  }
  if (!fs::is_regular_file(real, ec)) throw Error(dir_ + ": " + name + " is not a regular file");
  return real.string();
}

void HfCheckpoint::addShard(const std::string& name) {
  const std::string path = member(name);
  const auto header = compression::readSafetensorsHeader(path);
  const size_t file = files_.size();
  files_.push_back(path);
  for (const auto& t : header.tensors) {
    if (!entries_.emplace(t.name, Entry{file, t.dtype, t.shape, 8 + header.headerBytes + t.begin, t.end - t.begin}).second) {
      throw WireError(dir_ + ": tensor \"" + t.name.substr(0, 128) + "\" is in two shards");
    }
    totalBytes_ += t.end - t.begin;
  }
}

HfCheckpoint::HfCheckpoint(const std::string& dir) {
  std::error_code ec;
  dir_ = fs::canonical(dir, ec).string();
  if (ec || !fs::is_directory(dir_, ec)) throw Error(dir + " is not a directory");
  config_ = readSmall(member("config.json"), kMaxConfigBytes);
  if (!nlohmann::json::accept(config_)) throw WireError(dir_ + "/config.json is not valid JSON");
  if (!fs::exists(fs::path(dir_) / kIndex, ec)) {
    addShard(kSingle);
    return;
  }
  const std::string indexPath = member(kIndex);
  const auto index = nlohmann::json::parse(readSmall(indexPath, kMaxIndexBytes), nullptr, false);
  const auto map = index.is_object() ? index.find("weight_map") : index.end();
  if (map == index.end() || !map->is_object()) throw WireError(indexPath + " has no weight_map object");
  std::map<std::string, std::string> wanted;  // tensor -> shard
  std::vector<std::string> shards;
  for (const auto& [tensor, shard] : map->items()) {
    if (!shard.is_string()) throw WireError(indexPath + ": weight_map[\"" + tensor.substr(0, 128) + "\"] is not a file name");
    const std::string file = shard.get<std::string>();
    if (std::find(shards.begin(), shards.end(), file) == shards.end()) {
      if (shards.size() == kMaxShards) throw WireError(indexPath + " names more than " + std::to_string(kMaxShards) + " shards");
      shards.push_back(file);
    }
    wanted[tensor] = file;
  }
  for (const auto& shard : shards) addShard(shard);
  for (const auto& [tensor, shard] : wanted) {
    const auto it = entries_.find(tensor);
    if (it == entries_.end() || fs::path(files_[it->second.file]).filename() != shard) {
      throw WireError(indexPath + ": \"" + tensor.substr(0, 128) + "\" is not in " + shard.substr(0, 128));
    }
  }
}

std::vector<int64_t> HfCheckpoint::shape(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw Error(dir_ + " has no tensor \"" + name + "\"");
  return it->second.shape;
}

at::Tensor HfCheckpoint::read(const std::string& name) {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw Error(dir_ + " has no tensor \"" + name + "\"");
  const Entry& e = it->second;
  at::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(typeOf(e.dtype)));
  SKYTRAIN_CHECK(static_cast<uint64_t>(t.nbytes()) == e.bytes, "tensor " << name << " size disagrees with its header");
  readAt(files_[e.file], e.offset, e.bytes, static_cast<char*>(t.data_ptr()));
  bytesRead_ += e.bytes;
  return t;
}

}  // namespace skytrain::stages
