// A Hugging Face model directory, read tensor by tensor: config.json, and either
// model.safetensors or the shards model.safetensors.index.json names
// (model-0000k-of-0000n.safetensors). Opening reads only config.json, the index and each
// shard's header; read(name) reads that tensor's bytes alone, so a stage of a sharded 7B
// checkpoint reads its own layers and nothing else (bytesRead() counts what it read).
//
// Trusts nothing: every file is a plain name inside the directory, a regular file that
// stays inside it after symlinks, size-bounded (config.json 1 MiB, the index 64 MiB, at
// most 65,536 shards); every shard header passes compression/wire/safetensors_header.h's check;
// the index may only name tensors its shards hold.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace skytrain::stages {

class HfCheckpoint {
 public:
  // Whether `path` is a directory holding a config.json (so init_from reads it as one).
  static bool isModelDirectory(const std::string& path);

  // Throws skytrain::Error (WireError for a malformed file) naming the file and the problem.
  explicit HfCheckpoint(const std::string& dir);

  const std::string& configText() const { return config_; }
  bool has(const std::string& name) const { return entries_.count(name) > 0; }
  std::vector<int64_t> shape(const std::string& name) const;
  // The tensor in its stored dtype (F32, F16, BF16, ...). Throws skytrain::Error when absent
  // or unreadable.
  at::Tensor read(const std::string& name);

  size_t files() const { return files_.size(); }
  size_t tensors() const { return entries_.size(); }
  uint64_t bytesRead() const { return bytesRead_; }  // tensor data read so far
  uint64_t totalBytes() const { return totalBytes_; }  // of every tensor in the checkpoint

 private:
  struct Entry {
    size_t file = 0;
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t offset = 0;  // in the file
    uint64_t bytes = 0;
  };
  // A file of the directory by its plain name, checked; returns its path.
  std::string member(const std::string& name) const;
  void addShard(const std::string& name);

  std::string dir_;
  std::string config_;
  std::vector<std::string> files_;  // paths
  std::map<std::string, Entry> entries_;
  uint64_t bytesRead_ = 0;
  uint64_t totalBytes_ = 0;
};

}  // namespace skytrain::stages
