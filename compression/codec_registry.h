// Maps codec names to factories. Codecs are registered explicitly by name
// (registerBuiltinCodecs), never by static initialisers.
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
  // Builds a codec from the text after "name:" (empty when there is none).
  using Factory = std::function<std::unique_ptr<Codec>(const std::string& argument)>;

  void add(const std::string& name, Factory factory);
  // Parses a spec such as "none"; throws skytrain::Error naming the valid codecs when the
  // name is unknown.
  std::unique_ptr<Codec> make(const std::string& spec) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, Factory> factories_;
};

void registerBuiltinCodecs(CodecRegistry& registry);

// The registry with every built-in codec, built once.
const CodecRegistry& builtinCodecs();

}  // namespace skytrain::compression
