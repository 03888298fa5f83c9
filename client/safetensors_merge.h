// Merging safetensors files without Torch (`skytrain export`): each stage daemon sends its
// stage's parameters as one file; the CLI joins them into one with every tensor under its
// global name. The format's layout is in stages/safetensors.h.
//
// Headers are checked as strictly as the Torch-side reader does — length, JSON size and
// depth, dtype, shape, offsets that tile the data part exactly, the file's size — before
// anything is copied, because the bytes came over a socket.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace skytrain::client {

struct TensorEntry {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // in the data part
};

struct SafetensorsHeader {
  uint64_t headerBytes = 0;  // N: the data part starts at 8 + N
  std::vector<TensorEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
};

constexpr uint64_t kMaxMergeHeaderBytes = 64 << 20;

// Parses the first bytes of a file of fileSize bytes; `source` names it in errors. Throws
// skytrain::WireError naming the source and the problem.
SafetensorsHeader parseSafetensorsHeader(const std::string& prefix, uint64_t fileSize, const std::string& source);

// Bytes of the header part (8 + N) that parseSafetensorsHeader needs; throws when the
// length is over kMaxMergeHeaderBytes or past the file.
uint64_t safetensorsHeaderLength(const std::string& first8, uint64_t fileSize, const std::string& source);

// Writes `out` from `inputs` (tensors in input order), with `metadata`; refuses a name
// that two inputs share. Atomic: written to out.tmp and renamed. Returns the tensor count.
size_t mergeSafetensors(const std::vector<std::string>& inputs, const std::string& out,
                        const std::map<std::string, std::string>& metadata);

}  // namespace skytrain::client
