#include "stages/safetensors.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "scheduler/error.h"

namespace skytrain::stages {
namespace {

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

[[noreturn]] void bad(const std::string& source, const std::string& problem) {
  throw WireError("safetensors file " + source + ": " + problem);
}

// Rejects duplicate keys and deep nesting while parsing (the header is at most 2 levels).
json parseHeader(const std::string& text, const std::string& source) {
  std::vector<std::set<std::string>> keys;
  json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > 4) bad(source, "header nested too deep");
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.back().insert(parsed.get<std::string>()).second) {
      bad(source, "header repeats the key \"" + parsed.get<std::string>().substr(0, 64) + "\"");
    }
    return true;
  };
  try {
    return json::parse(text, check);
  } catch (const json::exception& e) {
    bad(source, std::string("header is not valid JSON: ") + e.what());
  }
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
  if (bytes.size() < 8) bad(source, "is " + std::to_string(bytes.size()) + " bytes, shorter than its 8-byte header length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (n > kMaxSafetensorsHeader || n > bytes.size() - 8) {
    bad(source, "header length " + std::to_string(n) + " exceeds the file (" + std::to_string(bytes.size()) +
                    " bytes) or the limit");
  }
  const json header = parseHeader(bytes.substr(8, n), source);
  if (!header.is_object()) bad(source, "header is not a JSON object");
  const uint64_t dataSize = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;
  SafeTensors out;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::vector<std::pair<uint64_t, size_t>> order;  // (offset, index in out.tensors)
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) bad(source, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) bad(source, "metadata \"" + m.key().substr(0, 64) + "\" is not a string");
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor \"" + name.substr(0, 128) + "\"";
    const json& entry = *it;
    if (!entry.is_object() || entry.size() != 3 || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets")) {
      bad(source, what + ": expected {dtype, shape, data_offsets}");
    }
    const DType* dtype = entry["dtype"].is_string() ? byName(entry["dtype"].get<std::string>()) : nullptr;
    if (!dtype) bad(source, what + ": unsupported dtype " + entry["dtype"].dump().substr(0, 32));
    const json& shape = entry["shape"];
    if (!shape.is_array() || shape.size() > 16) bad(source, what + ": shape is not an array of at most 16 sizes");
    std::vector<int64_t> sizes;
    // The product of the non-zero sizes is bounded too: an empty tensor of sizes 2^40 x 2^40
    // x ... would overflow LibTorch's strides.
    uint64_t nonZero = 1;
    bool empty = false;
    for (const auto& d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) bad(source, what + ": bad size in its shape");
      const uint64_t size = d.get<uint64_t>();
      sizes.push_back(static_cast<int64_t>(size));
      if (size == 0) {
        empty = true;
        continue;
      }
      if (nonZero > (uint64_t{1} << 48) / size) bad(source, what + ": its shape has more than 2^48 elements");
      nonZero *= size;
    }
    const uint64_t elements = empty ? 0 : nonZero;
    if (elements > dataSize / dtype->bytes) bad(source, what + ": its shape needs more bytes than the file has");
    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      bad(source, what + ": data_offsets is not [begin, end]");
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > dataSize) {
      bad(source, what + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                      ") lie outside the data (" + std::to_string(dataSize) + " bytes)");
    }
    if (end - begin != elements * dtype->bytes) {
      bad(source, what + ": data_offsets span " + std::to_string(end - begin) + " bytes, its shape and dtype need " +
                      std::to_string(elements * dtype->bytes));
    }
    spans.emplace_back(begin, end);
    at::Tensor t = torch::empty(sizes, torch::TensorOptions().dtype(dtype->type));
    if (end > begin) std::memcpy(t.data_ptr(), data + begin, end - begin);
    order.emplace_back(begin, out.tensors.size());
    out.tensors.emplace_back(name, t);
  }
  // File order: by offset (the JSON header's own key order is not kept).
  std::stable_sort(order.begin(), order.end());
  std::vector<std::pair<std::string, at::Tensor>> sorted;
  for (const auto& entry : order) sorted.push_back(std::move(out.tensors[entry.second]));
  out.tensors = std::move(sorted);
  // The tensors must tile the data part: no gaps, no overlaps, nothing after.
  std::sort(spans.begin(), spans.end());
  uint64_t expected = 0;
  for (const auto& [begin, end] : spans) {
    if (begin != expected) bad(source, "tensor data overlap or leave a gap at byte " + std::to_string(expected));
    expected = end;
  }
  if (expected != dataSize) bad(source, std::to_string(dataSize - expected) + " bytes after the last tensor");
  return out;
}

}  // namespace skytrain::stages
