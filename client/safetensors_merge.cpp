#include "client/safetensors_merge.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "compression/safetensors_header.h"
#include "scheduler/error.h"

namespace skytrain::client {

using nlohmann::json;

size_t mergeSafetensors(const std::vector<std::string>& inputs, const std::string& out,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<compression::SafetensorsHeader> headers;
  std::set<std::string> names;
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& path : inputs) {
    headers.push_back(compression::readSafetensorsHeader(path));
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
