// Maps codec names to factories and parses codec specs. Codecs are registered explicitly
// by name (registerBuiltinCodecs), never by static initialisers.
//
// Spec grammar:   spec  := item ('+' item)*        item := name [':' argument] | 'ef(' spec ')'
// In "a+b" the rightmost codec b meets the tensor first and encodes its float parts (SVD
// factors, top-k values) with the spec left of it: "fp16+svd:0.6" factors by SVD and sends
// the factors as fp16. Only structural codecs (svd, topk) and zstd, which compresses the
// payload of the codec left of it ("int8+zstd"), may stand right of a '+'.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compression/codec.h"

namespace skytrain::compression {

class CodecRegistry {
 public:
  // Builds a codec from its argument (the text after "name:", empty when none) and, for
  // structural codecs, the codec for its parts (null when the spec has no '+' before it).
  using Factory = std::function<std::unique_ptr<Codec>(const std::string& argument, std::unique_ptr<Codec> inner)>;

  void add(const std::string& name, Factory factory);
  // Parses a spec; throws skytrain::Error naming the spec, and the valid codecs when a name
  // is unknown.
  std::unique_ptr<Codec> make(const std::string& spec) const;
  std::vector<std::string> names() const;

 private:
  std::unique_ptr<Codec> makeChain(const std::vector<std::string>& items, size_t count, const std::string& spec) const;

  std::map<std::string, Factory> factories_;
};

void registerBuiltinCodecs(CodecRegistry& registry);

// The registry with every built-in codec, built once.
const CodecRegistry& builtinCodecs();

}  // namespace skytrain::compression
