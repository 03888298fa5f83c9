#include "client/export/hf_export.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "compression/wire/safetensors_header.h"
#include "daemon/protocol/spec/hf_layout.h"
#include "scheduler/error.h"

namespace skytrain::client {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One tensor of the export: where its bytes are in the merged file, and its HF name.
struct Item {
  std::string name;
  compression::SafetensorsEntry entry;
  bool transposed = false;
};

uint64_t bytesOf(const Item& item) { return item.entry.end - item.entry.begin; }

std::string shardName(size_t k, size_t n) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, n);
  return name;
}

// Writes one shard: the header of its items, then their bytes (a Conv1D weight transposed).
void writeShard(const std::string& path, const std::vector<Item>& items, std::ifstream& in, uint64_t dataStart) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& item : items) {
    std::vector<int64_t> shape = item.entry.shape;
    if (item.transposed) std::swap(shape[0], shape[1]);
    header[item.name] = {{"dtype", item.entry.dtype}, {"shape", shape}, {"data_offsets", {offset, offset + bytesOf(item)}}};
    offset += bytesOf(item);
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("cannot write \"" + path + "\": " + std::strerror(errno));
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  out.write(length, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::vector<char> buffer;
  for (const auto& item : items) {
    in.seekg(static_cast<std::streamoff>(dataStart + item.entry.begin));
    if (!item.transposed) {
      buffer.resize(std::min<uint64_t>(bytesOf(item), 1 << 20));
      for (uint64_t left = bytesOf(item); left > 0;) {
        const auto n = static_cast<std::streamsize>(std::min<uint64_t>(left, buffer.size()));
        if (!in.read(buffer.data(), n)) throw Error("cannot read the merged weights");
        out.write(buffer.data(), n);
        left -= static_cast<uint64_t>(n);
      }
      continue;
    }
    // [rows, cols] -> [cols, rows], element by element.
    const uint64_t rows = item.entry.shape[0], cols = item.entry.shape[1];
    const size_t e = compression::safetensorsDTypeBytes(item.entry.dtype);
    std::vector<char> source(bytesOf(item)), target(bytesOf(item));
    if (!in.read(source.data(), static_cast<std::streamsize>(source.size()))) throw Error("cannot read the merged weights");
    for (uint64_t i = 0; i < rows; ++i) {
      for (uint64_t j = 0; j < cols; ++j) std::copy_n(&source[(i * cols + j) * e], e, &target[(j * rows + i) * e]);
    }
    out.write(target.data(), static_cast<std::streamsize>(target.size()));
  }
  out.flush();
  if (!out) throw Error("cannot write \"" + path + "\": " + std::strerror(errno));
}

void writeText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text << "\n";
  if (!out.flush()) throw Error("cannot write \"" + path + "\": " + std::strerror(errno));
}

}  // namespace

uint64_t parseByteSize(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  static const std::vector<std::pair<std::string, double>> units{
      {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  for (const auto& [name, scale] : units) {
    if (used > 0 && unit == name && value > 0 && value * scale <= 1e15) return static_cast<uint64_t>(value * scale);
  }
  throw Error("\"" + text + "\" is not a size (e.g. 5GB, 500MB, 2GiB, or bytes)");
}

HfExport writeHfDirectory(const protocol::ModelSpec& model, const std::string& merged, const std::string& dir,
                          uint64_t shardBytes) {
  if (model.subspace.enabled()) {
    throw Error("a subspace model (model.subspace) has no Hugging Face layout: export it as safetensors");
  }
  if (!protocol::hasHfLayout(model)) {
    throw Error("model.kind \"" + model.kind + "\" has no Hugging Face layout (llama, gpt2 and the bert layout have): export it as safetensors");
  }
  std::error_code ec;
  const auto status = fs::symlink_status(dir, ec);
  if (fs::exists(status) && !(fs::is_directory(status) && fs::is_empty(dir, ec))) {
    throw Error("\"" + dir + "\" exists and is not an empty directory: --format hf writes a new directory");
  }
  // The merged file came from this CLI's own merge of checked stage files; its header is
  // checked again all the same.
  const auto header = compression::readSafetensorsHeader(merged);
  std::ifstream in(merged, std::ios::binary);

  std::vector<Item> items;
  for (const auto& entry : header.tensors) {
    const auto names = protocol::hfNames(model, entry.name);
    if (names.empty()) throw Error("tensor \"" + entry.name + "\" has no place in the " + model.kind + " Hugging Face layout");
    if (!protocol::hfExported(model, entry.name)) continue;  // a tied copy
    if (names[0].transposed && entry.shape.size() != 2) throw Error("tensor \"" + entry.name + "\" is not a matrix");
    items.push_back({names[0].name, entry, names[0].transposed});
  }
  // Shards in order, each up to shardBytes (a larger tensor alone in its own).
  std::vector<std::vector<Item>> shards(1);
  uint64_t inShard = 0, total = 0;
  for (auto& item : items) {
    if (inShard > 0 && inShard + bytesOf(item) > shardBytes) shards.emplace_back(), inShard = 0;
    inShard += bytesOf(item);
    total += bytesOf(item);
    shards.back().push_back(std::move(item));
  }
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create \"" + dir + "\": " + ec.message());
  json weightMap = json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string name = shards.size() == 1 ? "model.safetensors" : shardName(k, shards.size());
    writeShard(dir + "/" + name, shards[k], in, 8 + header.headerBytes);
    for (const auto& item : shards[k]) weightMap[item.name] = name;
  }
  if (shards.size() > 1) {
    writeText(dir + "/model.safetensors.index.json",
              json({{"metadata", {{"total_size", total}}}, {"weight_map", weightMap}}).dump(2));
  }
  const std::string dtype = header.tensors.empty() ? "F32" : header.tensors.front().dtype;
  const std::string torchDtype = dtype == "BF16" ? "bfloat16" : dtype == "F16" ? "float16" : "float32";
  writeText(dir + "/config.json", protocol::hfConfig(model, torchDtype).dump(2));
  return {weightMap.size(), shards.size(), total};
}

}  // namespace skytrain::client
