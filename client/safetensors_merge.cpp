#include "client/safetensors_merge.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "daemon/protocol/json_reader.h"
#include "scheduler/error.h"

namespace skytrain::client {
namespace {

using nlohmann::json;

int64_t dtypeBytes(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                                       {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

uint64_t fileSizeOf(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error("cannot read \"" + path + "\"");
  return static_cast<uint64_t>(in.tellg());
}

}  // namespace

uint64_t safetensorsHeaderLength(const std::string& first8, uint64_t fileSize, const std::string& source) {
  if (first8.size() < 8 || fileSize < 8) throw WireError(source + ": shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(first8[i]);
  if (n > kMaxMergeHeaderBytes) {
    throw WireError(source + ": header of " + std::to_string(n) + " bytes is over the limit of " +
                    std::to_string(kMaxMergeHeaderBytes));
  }
  if (8 + n > fileSize) throw WireError(source + ": header of " + std::to_string(n) + " bytes runs past the file");
  return 8 + n;
}

SafetensorsHeader parseSafetensorsHeader(const std::string& prefix, uint64_t fileSize, const std::string& source) {
  SafetensorsHeader h;
  h.headerBytes = safetensorsHeaderLength(prefix, fileSize, source) - 8;
  if (prefix.size() < 8 + h.headerBytes) throw WireError(source + ": header cut short");
  json doc;
  try {
    doc = protocol::parseBoundedJson(prefix.substr(8, h.headerBytes), kMaxMergeHeaderBytes, 4);
  } catch (const std::exception& e) {
    throw WireError(source + ": header is not a JSON object: " + e.what());
  }
  if (!doc.is_object()) throw WireError(source + ": header is not a JSON object");
  const uint64_t dataBytes = fileSize - 8 - h.headerBytes;
  for (const auto& [name, entry] : doc.items()) {
    const std::string where = source + ": tensor \"" + name.substr(0, 200) + "\"";
    if (name == "__metadata__") {
      if (!entry.is_object()) throw WireError(source + ": __metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) throw WireError(source + ": __metadata__." + key.substr(0, 100) + " is not a string");
        h.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets") ||
        entry.size() != 3) {
      throw WireError(where + ": needs exactly dtype, shape and data_offsets");
    }
    TensorEntry t;
    t.name = name;
    if (!entry["dtype"].is_string() || dtypeBytes(entry["dtype"].get<std::string>()) == 0) {
      throw WireError(where + ": unknown dtype " + entry["dtype"].dump().substr(0, 40));
    }
    t.dtype = entry["dtype"].get<std::string>();
    const json& shape = entry["shape"];
    if (!shape.is_array() || shape.size() > 16) throw WireError(where + ": shape is not an array of at most 16 sizes");
    uint64_t elements = 1;
    for (const auto& d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) throw WireError(where + ": bad dimension");
      t.shape.push_back(d.get<int64_t>());
      elements *= d.get<uint64_t>();
      if (elements > (uint64_t{1} << 44)) throw WireError(where + ": too many elements");
    }
    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      throw WireError(where + ": data_offsets is not [begin, end]");
    }
    t.begin = offsets[0].get<uint64_t>();
    t.end = offsets[1].get<uint64_t>();
    if (t.begin > t.end || t.end > dataBytes) throw WireError(where + ": data_offsets run past the data");
    if (t.end - t.begin != elements * static_cast<uint64_t>(dtypeBytes(t.dtype))) {
      throw WireError(where + ": data_offsets do not hold its shape");
    }
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  uint64_t at = 0;
  for (const auto& t : h.tensors) {
    if (t.begin != at) throw WireError(source + ": tensor \"" + t.name.substr(0, 200) + "\" overlaps or leaves a gap");
    at = t.end;
  }
  if (at != dataBytes) throw WireError(source + ": the tensors do not cover the data part exactly");
  return h;
}

size_t mergeSafetensors(const std::vector<std::string>& inputs, const std::string& out,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsHeader> headers;
  std::set<std::string> names;
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& path : inputs) {
    const uint64_t size = fileSizeOf(path);
    std::ifstream in(path, std::ios::binary);
    std::string first8(8, '\0');
    in.read(first8.data(), 8);
    std::string prefix(safetensorsHeaderLength(first8, size, path), '\0');
    in.seekg(0);
    in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
    headers.push_back(parseSafetensorsHeader(prefix, size, path));
    for (const auto& t : headers.back().tensors) {
      if (!names.insert(t.name).second) throw Error("tensor \"" + t.name + "\" is in two stages' weights");
      header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + (t.end - t.begin)}}};
      offset += t.end - t.begin;
    }
  }
  header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data part starts 8-byte aligned
  const std::string tmp = out + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (!o) throw Error("cannot write \"" + tmp + "\"");
    char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
    o.write(length, 8);
    o.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::vector<char> buffer(1 << 20);
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::ifstream in(inputs[i], std::ios::binary);
      for (const auto& t : headers[i].tensors) {
        in.seekg(static_cast<std::streamoff>(8 + headers[i].headerBytes + t.begin));
        for (uint64_t left = t.end - t.begin; left > 0;) {
          const auto n = static_cast<std::streamsize>(std::min<uint64_t>(left, buffer.size()));
          if (!in.read(buffer.data(), n)) throw Error("cannot read \"" + inputs[i] + "\"");
          o.write(buffer.data(), n);
          left -= static_cast<uint64_t>(n);
        }
      }
    }
    o.flush();
    if (!o) throw Error("cannot write \"" + tmp + "\"");
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) throw Error("cannot rename \"" + tmp + "\" to \"" + out + "\"");
  return names.size();
}

}  // namespace skytrain::client
