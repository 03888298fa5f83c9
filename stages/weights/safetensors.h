// safetensors: the tensor file format Python's `safetensors` reads and writes, used for
// checkpoints and weight export.
//
//   offset  size  field
//        0     8  N, the header length, little-endian uint64
//        8     N  JSON header: {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
//                 ..., "__metadata__": {"<key>": "<string value>", ...}}
//      8+N     -  the data: each tensor's raw little-endian bytes at [b, e) of this part
//
// The reader trusts nothing: the header length, the JSON (size, depth, duplicate keys),
// every dtype, shape and offset are checked against each other and the file's size before
// anything is allocated; tensors must tile the data part exactly.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace skytrain::stages {

struct SafeTensors {
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // in file order
  std::map<std::string, std::string> metadata;
};

constexpr size_t kMaxSafetensorsHeader = 64 << 20;

// Serialises tensors (float32, float16, bfloat16, int64, int32, int8, uint8; any layout)
// and string metadata. Throws skytrain::Error on an unsupported dtype or a duplicate name.
std::string encodeSafetensors(const SafeTensors& file);
// The same bytes handed to `sink` piece by piece (the header, then each tensor's data), each
// tensor released once written: a checkpoint is streamed to its file, never held twice.
void writeSafetensors(SafeTensors&& file, const std::function<void(const char* data, size_t size)>& sink);

// Parses the bytes of a file; `source` names it in errors. Throws skytrain::WireError
// naming the source and the problem.
SafeTensors decodeSafetensors(const std::string& bytes, const std::string& source);
// The same without copying the data: every tensor is a view into `bytes`, which stays
// alive while any of them does (a checkpoint's restore: the file is held once, not twice).
SafeTensors decodeSafetensors(std::shared_ptr<const std::string> bytes, const std::string& source);

}  // namespace skytrain::stages
