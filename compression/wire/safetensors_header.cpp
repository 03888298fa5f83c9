#include "compression/wire/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>

#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& source, const std::string& problem) {
  throw WireError("safetensors file " + source + ": " + problem);
}

// Rejects duplicate keys and deep nesting while parsing (the header is at most 2 levels).
json parseJson(const std::string& text, const std::string& source) {
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

SafetensorsEntry readEntry(const std::string& name, const json& entry, uint64_t dataSize, const std::string& source) {
  const std::string what = "tensor \"" + name.substr(0, 128) + "\"";
  if (!entry.is_object() || entry.size() != 3 || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    bad(source, what + ": expected {dtype, shape, data_offsets}");
  }
  SafetensorsEntry out;
  out.name = name;
  const size_t bytes = entry["dtype"].is_string() ? safetensorsDTypeBytes(entry["dtype"].get<std::string>()) : 0;
  if (bytes == 0) bad(source, what + ": unsupported dtype " + entry["dtype"].dump().substr(0, 32));
  out.dtype = entry["dtype"].get<std::string>();
  const json& shape = entry["shape"];
  if (!shape.is_array() || shape.size() > 16) bad(source, what + ": shape is not an array of at most 16 sizes");
  // The product of the non-zero sizes is bounded too: an empty tensor of sizes 2^40 x 2^40
  // x ... would overflow LibTorch's strides.
  uint64_t nonZero = 1;
  bool empty = false;
  for (const auto& d : shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) bad(source, what + ": bad size in its shape");
    const uint64_t size = d.get<uint64_t>();
    out.shape.push_back(static_cast<int64_t>(size));
    if (size == 0) {
      empty = true;
      continue;
    }
    if (nonZero > (uint64_t{1} << 48) / size) bad(source, what + ": its shape has more than 2^48 elements");
    nonZero *= size;
  }
  const uint64_t elements = empty ? 0 : nonZero;
  if (elements > dataSize / bytes) bad(source, what + ": its shape needs more bytes than the file has");
  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    bad(source, what + ": data_offsets is not [begin, end]");
  }
  out.begin = offsets[0].get<uint64_t>();
  out.end = offsets[1].get<uint64_t>();
  if (out.begin > out.end || out.end > dataSize) {
    bad(source, what + ": data_offsets [" + std::to_string(out.begin) + ", " + std::to_string(out.end) +
                    ") lie outside the data (" + std::to_string(dataSize) + " bytes)");
  }
  if (out.end - out.begin != elements * bytes) {
    bad(source, what + ": data_offsets span " + std::to_string(out.end - out.begin) + " bytes, its shape and dtype need " +
                    std::to_string(elements * bytes));
  }
  return out;
}

}  // namespace

size_t safetensorsDTypeBytes(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                                      {"I32", 4}, {"I8", 1},  {"U8", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

uint64_t safetensorsPrefixLength(const std::string& first8, uint64_t fileSize, const std::string& source) {
  if (first8.size() < 8 || fileSize < 8) {
    bad(source, "is " + std::to_string(fileSize) + " bytes, shorter than its 8-byte header length");
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(first8[i])) << (8 * i);
  if (n > kMaxSafetensorsHeaderBytes || n > fileSize - 8) {
    bad(source, "header length " + std::to_string(n) + " exceeds the file (" + std::to_string(fileSize) +
                    " bytes) or the limit");
  }
  return 8 + n;
}

SafetensorsHeader parseSafetensorsHeader(const std::string& prefix, uint64_t fileSize, const std::string& source) {
  SafetensorsHeader out;
  out.headerBytes = safetensorsPrefixLength(prefix, fileSize, source) - 8;
  if (prefix.size() < 8 + out.headerBytes) bad(source, "header cut short");
  const json header = parseJson(prefix.substr(8, out.headerBytes), source);
  if (!header.is_object()) bad(source, "header is not a JSON object");
  const uint64_t dataSize = fileSize - 8 - out.headerBytes;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) bad(source, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) bad(source, "metadata \"" + m.key().substr(0, 64) + "\" is not a string");
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    out.tensors.push_back(readEntry(it.key(), *it, dataSize, source));
  }
  // File order: by offset, an empty tensor before one that starts where it does (the JSON
  // header's own key order is not kept). The tensors must tile the data part: no gaps, no
  // overlaps, nothing after.
  std::stable_sort(out.tensors.begin(), out.tensors.end(),
                   [](const auto& a, const auto& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t expected = 0;
  for (const auto& t : out.tensors) {
    if (t.begin != expected) bad(source, "tensor data overlap or leave a gap at byte " + std::to_string(expected));
    expected = t.end;
  }
  if (expected != dataSize) bad(source, std::to_string(dataSize - expected) + " bytes after the last tensor");
  out.fileBytes = fileSize;
  return out;
}

SafetensorsHeader readSafetensorsHeader(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::is_regular_file(status) || !in) throw Error("cannot read " + path + ": not a readable regular file");
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw Error("cannot read " + path + ": " + ec.message());
  std::string first8(8, '\0');
  in.read(first8.data(), 8);
  std::string prefix(safetensorsPrefixLength(first8, size, path), '\0');
  in.seekg(0);
  if (!in.read(prefix.data(), static_cast<std::streamsize>(prefix.size()))) throw Error("cannot read " + path);
  return parseSafetensorsHeader(prefix, size, path);
}

}  // namespace skytrain::compression
