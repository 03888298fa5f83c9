// The header of a safetensors file (layout: stages/weights/safetensors.h), read without Torch: the
// one check of a file from a socket or a disk that both stages/weights/safetensors.cpp (into
// tensors) and the CLI's `export` (merging stages' files) apply before anything else.
//
// Trusts nothing: the header length against the limit and the file, the JSON (duplicate
// keys, depth), each dtype, shape (at most 16 sizes, each <= 2^40, at most 2^48 elements)
// and offsets against each other and the file's size; the tensors must tile the data part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace skytrain::compression {

constexpr uint64_t kMaxSafetensorsHeaderBytes = 64 << 20;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "I64", "I32", "I8", "U8"
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // in the data part
};

struct SafetensorsHeader {
  uint64_t headerBytes = 0;                 // N: the data part starts at 8 + N
  uint64_t fileBytes = 0;                   // 8 + N + the tensors' bytes
  std::vector<SafetensorsEntry> tensors;    // in data order
  std::map<std::string, std::string> metadata;
};

// Bytes per element of a dtype name; 0 for one this project does not read.
size_t safetensorsDTypeBytes(const std::string& dtype);

// 8 + N: how much of a file of fileSize bytes parseSafetensorsHeader needs, from its first 8
// bytes. Throws skytrain::WireError when N is over the limit or past the file.
uint64_t safetensorsPrefixLength(const std::string& first8, uint64_t fileSize, const std::string& source);

// Parses the first 8 + N bytes of a file of fileSize bytes; `source` names it in errors.
// Throws skytrain::WireError naming the source and the problem.
SafetensorsHeader parseSafetensorsHeader(const std::string& prefix, uint64_t fileSize, const std::string& source);

// Reads and checks the header of the safetensors file at `path`: its first 8 + N bytes,
// never the tensors, so a crafted or sparse file is refused before anything reads it whole.
// Throws skytrain::Error when the path is not a readable regular file, WireError when its
// header fails the check above.
SafetensorsHeader readSafetensorsHeader(const std::string& path);

}  // namespace skytrain::compression
