#include "compression/codec_registry.h"

#include "compression/none_codec.h"
#include "scheduler/error.h"

namespace skytrain::compression {

void CodecRegistry::add(const std::string& name, Factory factory) {
  SKYTRAIN_CHECK(!factories_.count(name), "codec registered twice: " << name);
  factories_[name] = std::move(factory);
}

std::unique_ptr<Codec> CodecRegistry::make(const std::string& spec) const {
  const auto colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const std::string argument = colon == std::string::npos ? "" : spec.substr(colon + 1);
  auto it = factories_.find(name);
  if (it == factories_.end()) {
    std::string valid;
    for (const auto& n : names()) valid += (valid.empty() ? "" : ", ") + n;
    throw Error("unknown codec \"" + name + "\" in \"" + spec + "\" (valid: " + valid + ")");
  }
  return it->second(argument);
}

std::vector<std::string> CodecRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& entry : factories_) out.push_back(entry.first);
  return out;
}

void registerBuiltinCodecs(CodecRegistry& registry) {
  registry.add("none", [](const std::string& argument) { return makeNoneCodec(argument); });
}

const CodecRegistry& builtinCodecs() {
  static const CodecRegistry registry = [] {
    CodecRegistry r;
    registerBuiltinCodecs(r);
    return r;
  }();
  return registry;
}

}  // namespace skytrain::compression
