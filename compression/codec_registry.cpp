#include "compression/codec_registry.h"

#include "compression/codecs.h"
#include "compression/side_tokens.h"
#include "scheduler/error.h"

namespace skytrain::compression {

void Codec::loadState(const CodecState& state) {
  if (!state.empty()) throw WireError("codec " + spec() + " keeps no state, got \"" + state.front().first + "\"");
}

CodecState prefixedState(const std::string& prefix, const CodecState& state) {
  CodecState out;
  for (const auto& [name, tensor] : state) out.emplace_back(prefix + name, tensor);
  return out;
}

CodecState stateUnder(const std::string& prefix, const CodecState& state) {
  CodecState out;
  for (const auto& [name, tensor] : state) {
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name.substr(prefix.size()), tensor);
  }
  return out;
}
namespace {

// Splits "a+ef(b+c)+d" at the '+' signs outside parentheses.
std::vector<std::string> splitChain(const std::string& spec) {
  std::vector<std::string> items(1);
  int depth = 0;
  for (char c : spec) {
    if (c == '(') ++depth;
    if (c == ')' && --depth < 0) throw Error("codec spec \"" + spec + "\" has an unmatched ')'");
    if (c == '+' && depth == 0) {
      items.emplace_back();
    } else {
      items.back() += c;
    }
  }
  if (depth != 0) throw Error("codec spec \"" + spec + "\" has an unmatched '('");
  for (const auto& item : items) {
    if (item.empty()) throw Error("codec spec \"" + spec + "\" has an empty element");
  }
  return items;
}

}  // namespace

void CodecRegistry::add(const std::string& name, Factory factory) {
  SKYTRAIN_CHECK(!factories_.count(name), "codec registered twice: " << name);
  factories_[name] = std::move(factory);
}

std::unique_ptr<Codec> CodecRegistry::make(const std::string& spec) const {
  if (spec.empty()) throw Error("codec spec is empty");
  const auto items = splitChain(spec);
  for (size_t i = 0; i + 1 < items.size(); ++i) {
    if (items[i] == "pred") throw Error("codec spec \"" + spec + "\": \"pred\" must be the last element");
  }
  return makeChain(items, items.size(), spec);
}

std::unique_ptr<Codec> CodecRegistry::makeChain(const std::vector<std::string>& items, size_t count,
                                                const std::string& spec) const {
  const std::string& item = items[count - 1];
  std::string name = item, argument;
  if (item.rfind("ef(", 0) == 0 && item.back() == ')') {
    name = "ef";
    argument = item.substr(3, item.size() - 4);
  } else if (const auto colon = item.find(':'); colon != std::string::npos) {
    name = item.substr(0, colon);
    argument = item.substr(colon + 1);
  }
  auto it = factories_.find(name);
  if (it == factories_.end()) {
    std::string valid;
    for (const auto& n : names()) valid += (valid.empty() ? "" : ", ") + n;
    throw Error("unknown codec \"" + name + "\" in \"" + spec + "\" (valid: " + valid + ")");
  }
  std::unique_ptr<Codec> inner = count > 1 ? makeChain(items, count - 1, spec) : nullptr;
  try {
    return it->second(argument, std::move(inner));
  } catch (const Error& e) {
    throw Error("codec spec \"" + spec + "\": " + e.what());
  }
}

std::vector<std::string> CodecRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& entry : factories_) out.push_back(entry.first);
  return out;
}

void registerBuiltinCodecs(CodecRegistry& registry) {
  registry.add("none", makeNoneCodec);
  registry.add("fp16", makeFp16Codec);
  registry.add("bf16", makeBf16Codec);
  registry.add("int8", makeInt8Codec);
  registry.add("int4", makeInt4Codec);
  registry.add("int3", makeInt3Codec);
  registry.add("q13", makeQ13Codec);
  registry.add("topk", makeTopKCodec);
  registry.add("svd", makeSvdCodec);
  registry.add("tokens", makeTokenCodec);
  registry.add("zstd", makeZstdCodec);
  registry.add("rot", makeRotationCodec);
  registry.add("pred", makePredictiveCodec);
  registry.add("ef", [&registry](const std::string& argument, std::unique_ptr<Codec> inner) {
    if (inner) throw Error("ef(...) must stand alone or outermost, not right of '+'");
    auto wrapped = registry.make(argument);
    if (tokenConditioned(*wrapped)) throw Error("ef(...) cannot wrap \"pred\": put it outside, as in ef(q13)+pred");
    return makeErrorFeedbackCodec(std::move(wrapped));
  });
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
