#include "stages/tokens/token_manifest.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "scheduler/error.h"
#include "stages/tokens/token_files.h"

namespace skytrain::stages {
namespace {

constexpr uint64_t kManifestMaxBytes = 16 << 20;

std::vector<std::string> shardNames(const nlohmann::json& j, const char* key, const std::string& file) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() > 65536) {
    throw WireError("\"" + file + "\": \"" + key + "\" is not a list of at most 65536 shard names");
  }
  std::vector<std::string> names;
  for (const auto& name : *it) {
    if (!name.is_string()) throw WireError("\"" + file + "\": \"" + key + "\" holds a non-string");
    const auto text = name.get<std::string>();
    if (text.empty() || text.size() > 255 || text.find('/') != std::string::npos || text == "." || text == "..") {
      throw WireError("\"" + file + "\": shard name \"" + text + "\" is not a plain file name");
    }
    names.push_back(text);
  }
  return names;
}

}  // namespace

bool isTokenDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) &&
         std::filesystem::is_regular_file(std::filesystem::path(path) / kTokenManifestName, ec);
}

TokenManifest readTokenManifest(const std::string& dir) {
  const std::string file = (std::filesystem::path(dir) / kTokenManifestName).string();
  std::error_code ec;
  const auto size = std::filesystem::file_size(file, ec);
  if (ec) throw WireError("\"" + file + "\" cannot be read: " + ec.message());
  if (size > kManifestMaxBytes) throw WireError("\"" + file + "\" is over 16 MiB");
  std::ifstream in(file, std::ios::binary);
  std::string bytes(size, '\0');
  if (!in.read(bytes.data(), static_cast<std::streamsize>(size))) throw WireError("\"" + file + "\" cannot be read");
  try {
    const auto j = nlohmann::json::parse(bytes);
    TokenManifest m;
    if (j.value("format", "") != "skytrain-tokens" || j.value("version", 0) != 1) {
      throw WireError("\"" + file + "\" is not a skytrain-tokens manifest of version 1");
    }
    m.layout = j.at("layout").get<std::string>();
    if (m.layout != "indexed" && m.layout != "flat") throw WireError("\"" + file + "\": layout \"" + m.layout + "\"");
    m.dtype = j.at("dtype").get<std::string>();
    tokenDtype(m.dtype);
    m.tokenizer = j.at("tokenizer").get<std::string>();
    m.vocabSize = j.at("vocab_size").get<int>();
    m.documents = j.at("documents").get<uint64_t>();
    m.tokens = j.at("tokens").get<uint64_t>();
    m.train = shardNames(j, "train", file);
    m.validation = shardNames(j, "validation", file);
    if (m.train.empty()) throw WireError("\"" + file + "\" names no train shard");
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw WireError("\"" + file + "\" is not a valid manifest: " + e.what());
  } catch (const WireError&) {
    throw;
  } catch (const Error& e) {
    throw WireError("\"" + file + "\": " + e.what());
  }
}

std::string tokenManifestJson(const TokenManifest& m) {
  nlohmann::json j = {{"format", "skytrain-tokens"}, {"version", 1}, {"layout", m.layout}, {"dtype", m.dtype},
                      {"tokenizer", m.tokenizer}, {"vocab_size", m.vocabSize}, {"documents", m.documents},
                      {"tokens", m.tokens}, {"train", m.train}, {"validation", m.validation}};
  return j.dump(2) + "\n";
}

}  // namespace skytrain::stages
