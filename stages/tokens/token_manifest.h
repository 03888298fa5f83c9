// The manifest of a directory `skytrain data prepare` wrote (stages/tokens/token_files.h has the
// shards' format). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace skytrain::stages {

// A directory `skytrain data prepare` wrote holds its shards and this manifest, which names
// them (plain names inside the directory) and says how they were made.
inline constexpr const char* kTokenManifestName = "skytrain-tokens.json";

struct TokenManifest {
  std::string layout = "indexed";  // or "flat"
  std::string dtype = "uint16";
  std::string tokenizer = "byte";  // "byte" or "sentencepiece:<model file name>"
  int vocabSize = 256;
  uint64_t documents = 0;
  uint64_t tokens = 0;
  std::vector<std::string> train;       // shard file names, in order
  std::vector<std::string> validation;  // shard file names, in order
};

bool isTokenDirectory(const std::string& path);
// Reads and checks the manifest (at most 16 MiB; names plain, no "/" or ".."); throws
// skytrain::WireError naming the file and the field.
TokenManifest readTokenManifest(const std::string& dir);
std::string tokenManifestJson(const TokenManifest& manifest);

}  // namespace skytrain::stages
