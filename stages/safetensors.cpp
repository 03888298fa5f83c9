#include "stages/safetensors.h"

#include <torch/torch.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "compression/safetensors_header.h"
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
  json header = json::object();
  std::set<std::string> names;
  std::vector<at::Tensor> contiguous;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : file.tensors) {
    const DType* dtype = byType(tensor.scalar_type());
    if (!dtype) throw Error("safetensors: tensor \"" + name + "\" has an unsupported dtype");
    if (name == "__metadata__" || !names.insert(name).second) throw Error("safetensors: duplicate name \"" + name + "\"");
    at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype->bytes;
    header[name] = {{"dtype", dtype->name}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(t);
  }
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');  // the data part starts 8-byte aligned
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + offset);
  for (const auto& t : contiguous) {
    out.append(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  }
  return out;
}

SafeTensors decodeSafetensors(const std::string& bytes, const std::string& source) {
  const auto header = compression::parseSafetensorsHeader(bytes, bytes.size(), source);
  const char* data = bytes.data() + 8 + header.headerBytes;
  SafeTensors out;
  out.metadata = header.metadata;
  for (const auto& entry : header.tensors) {  // file order
    const DType* dtype = byName(entry.dtype);
    SKYTRAIN_CHECK(dtype, "dtype " << entry.dtype << " passed the header check but has no tensor type");
    at::Tensor t = torch::empty(entry.shape, torch::TensorOptions().dtype(dtype->type));
    if (entry.end > entry.begin) std::memcpy(t.data_ptr(), data + entry.begin, entry.end - entry.begin);
    out.tensors.emplace_back(entry.name, t);
  }
  return out;
}

}  // namespace skytrain::stages
