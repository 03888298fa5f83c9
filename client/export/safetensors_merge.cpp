#include "client/export/safetensors_merge.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>

#include "compression/wire/safetensors_header.h"
#include "scheduler/error.h"

namespace skytrain::client {

using nlohmann::json;

namespace {

using compression::SafetensorsHeader;

struct Located {
  size_t input = 0;
  const compression::SafetensorsEntry* tensor = nullptr;
};

// Whether two tensors' bytes are equal, read 1 MiB at a time.
bool sameBytes(const std::vector<std::string>& inputs, const std::vector<SafetensorsHeader>& headers, Located a,
               Located b) {
  if (a.tensor->end - a.tensor->begin != b.tensor->end - b.tensor->begin) return false;
  std::ifstream inA(inputs[a.input], std::ios::binary), inB(inputs[b.input], std::ios::binary);
  inA.seekg(static_cast<std::streamoff>(8 + headers[a.input].headerBytes + a.tensor->begin));
  inB.seekg(static_cast<std::streamoff>(8 + headers[b.input].headerBytes + b.tensor->begin));
  std::vector<char> x(1 << 20), y(1 << 20);
  for (uint64_t left = a.tensor->end - a.tensor->begin; left > 0;) {
    const auto n = static_cast<std::streamsize>(std::min<uint64_t>(left, x.size()));
    if (!inA.read(x.data(), n)) throw Error("cannot read \"" + inputs[a.input] + "\"");
    if (!inB.read(y.data(), n)) throw Error("cannot read \"" + inputs[b.input] + "\"");
    if (!std::equal(x.begin(), x.begin() + n, y.begin())) return false;
    left -= static_cast<uint64_t>(n);
  }
  return true;
}

}  // namespace

MergedFile mergeSafetensors(const std::vector<std::string>& inputs, const std::string& out,
                            const std::map<std::string, std::string>& metadata,
                            const std::vector<std::pair<std::string, std::string>>& tied) {
  MergedFile result;
  std::vector<SafetensorsHeader> headers;
  std::map<std::string, Located> where;
  for (size_t i = 0; i < inputs.size(); ++i) {
    headers.push_back(compression::readSafetensorsHeader(inputs[i]));
  }
  // A subspace model's frozen frame, which every stage holds alike, is written once; any
  // other name twice, or the frame with other bytes, is an error.
  std::set<std::string> repeated;
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (const auto& t : headers[i].tensors) {
      const auto [at, added] = where.emplace(t.name, Located{i, &t});
      if (added) continue;
      const auto& first = *at->second.tensor;
      if (t.name.rfind("subspace.", 0) != 0) throw Error("tensor \"" + t.name + "\" is in two stages' weights");
      if (first.dtype != t.dtype || first.shape != t.shape || !sameBytes(inputs, headers, at->second, Located{i, &t})) {
        throw Error("tensor \"" + t.name + "\" is in two stages' weights, with different values");
      }
      repeated.insert(t.name);
    }
  }
  // A tied matrix once: its copy is left out once it is shown to be the same bytes.
  std::set<std::string> copies;
  std::string tiedList;
  for (const auto& [first, copy] : tied) {
    const auto a = where.find(first), b = where.find(copy);
    if (a == where.end() || b == where.end() || first == copy) continue;
    const auto& x = *a->second.tensor;
    const auto& y = *b->second.tensor;
    if (x.dtype != y.dtype || x.shape != y.shape || !sameBytes(inputs, headers, a->second, b->second)) {
      result.keptApart.push_back(copy);
      continue;
    }
    copies.insert(copy);
    tiedList += (tiedList.empty() ? "" : ",") + copy + "=" + first;
  }
  // Left out: a tied copy, and every holding of a repeated tensor but the first.
  auto leftOut = [&](size_t input, const compression::SafetensorsEntry& t) {
    return copies.count(t.name) > 0 || (repeated.count(t.name) > 0 && where.at(t.name).input != input);
  };
  json header = json::object();
  uint64_t offset = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (const auto& t : headers[i].tensors) {
      if (leftOut(i, t)) continue;
      header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + (t.end - t.begin)}}};
      offset += t.end - t.begin;
      ++result.tensors;
    }
  }
  std::map<std::string, std::string> meta = metadata;
  if (!tiedList.empty()) meta["skytrain_tied"] = tiedList;
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data part starts 8-byte aligned
  const std::string tmp = out + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (!o) throw Error("cannot write \"" + tmp + "\": " + std::string(std::strerror(errno)));
    char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
    o.write(length, 8);
    o.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::vector<char> buffer(1 << 20);
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::ifstream in(inputs[i], std::ios::binary);
      for (const auto& t : headers[i].tensors) {
        if (leftOut(i, t)) continue;
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
    if (!o) throw Error("cannot write \"" + tmp + "\": " + std::string(std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), out.c_str()) != 0) throw Error("cannot rename \"" + tmp + "\" to \"" + out + "\": " + std::string(std::strerror(errno)));
  return result;
}

}  // namespace skytrain::client
