#include "stages/weights/safetensors.h"

#include <torch/torch.h>

#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "compression/wire/safetensors_header.h"
#include "scheduler/error.h"

namespace skytrain::stages {
namespace {

static_assert(kMaxSafetensorsHeader == compression::kMaxSafetensorsHeaderBytes, "one header limit");

using nlohmann::json;

struct DType {
  const char* name;
  at::ScalarType type;
  size_t bytes;
};

constexpr DType kDTypes[] = {{"F32", at::kFloat, 4}, {"F16", at::kHalf, 2}, {"BF16", at::kBFloat16, 2},
                             {"I64", at::kLong, 8},  {"I32", at::kInt, 4},  {"I8", at::kChar, 1},
                             {"U8", at::kByte, 1}};

const DType* byType(at::ScalarType type) {
  for (const auto& d : kDTypes) {
    if (d.type == type) return &d;
  }
  return nullptr;
}

const DType* byName(const std::string& name) {
  for (const auto& d : kDTypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

}  // namespace

std::string encodeSafetensors(const SafeTensors& file) {
  SafeTensors copy = file;  // the tensors shared, not their data
  std::string out;
  writeSafetensors(std::move(copy), [&](const char* data, size_t size) { out.append(data, size); });
  return out;
}

void writeSafetensors(SafeTensors&& file, const std::function<void(const char* data, size_t size)>& sink) {
  json header = json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (auto& [name, tensor] : file.tensors) {
    const DType* dtype = byType(tensor.scalar_type());
    if (!dtype) throw Error("safetensors: tensor \"" + name + "\" has an unsupported dtype");
    if (name == "__metadata__" || !names.insert(name).second) throw Error("safetensors: duplicate name \"" + name + "\"");
    tensor = tensor.detach().to(at::kCPU).contiguous();  // the same tensor when it already is
    const uint64_t bytes = static_cast<uint64_t>(tensor.numel()) * dtype->bytes;
    header[name] = {{"dtype", dtype->name}, {"shape", tensor.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');  // the data part starts 8-byte aligned
  std::string prefix(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  sink(prefix.data(), prefix.size());
  sink(text.data(), text.size());
  for (auto& [name, tensor] : file.tensors) {
    if (tensor.numel() > 0) sink(static_cast<const char*>(tensor.data_ptr()), tensor.numel() * tensor.element_size());
    tensor = at::Tensor();  // its memory back as soon as it is written
  }
}

namespace {

using TensorMaker = std::function<at::Tensor(const char* data, size_t bytes, const std::vector<int64_t>& shape, at::ScalarType)>;

SafeTensors decodeWith(const std::string& bytes, const std::string& source, const TensorMaker& make) {
  const auto header = compression::parseSafetensorsHeader(bytes, bytes.size(), source);
  const char* data = bytes.data() + 8 + header.headerBytes;
  SafeTensors out;
  out.metadata = header.metadata;
  for (const auto& entry : header.tensors) {  // file order
    const DType* dtype = byName(entry.dtype);
    SKYTRAIN_CHECK(dtype, "dtype " << entry.dtype << " passed the header check but has no tensor type");
    out.tensors.emplace_back(entry.name, make(data + entry.begin, entry.end - entry.begin, entry.shape, dtype->type));
  }
  return out;
}

}  // namespace

SafeTensors decodeSafetensors(const std::string& bytes, const std::string& source) {
  return decodeWith(bytes, source, [](const char* data, size_t n, const std::vector<int64_t>& shape, at::ScalarType type) {
    at::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(type));
    if (n > 0) std::memcpy(t.data_ptr(), data, n);
    return t;
  });
}

SafeTensors decodeSafetensors(std::shared_ptr<const std::string> bytes, const std::string& source) {
  return decodeWith(*bytes, source, [&](const char* data, size_t, const std::vector<int64_t>& shape, at::ScalarType type) {
    // A view the caller only reads (from_blob takes a mutable pointer); it holds the buffer.
    return torch::from_blob(const_cast<char*>(data), shape, [keep = bytes](void*) {}, torch::TensorOptions().dtype(type));
  });
}

}  // namespace skytrain::stages
