#include "compression/codec_util.h"

#include <torch/torch.h>

#include <cstring>

#include "compression/tensor_bytes.h"
#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

void putLittle(std::string& out, size_t offset, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out[offset + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t getLittle(const std::string& in, size_t offset, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(static_cast<unsigned char>(in[offset + i])) << (8 * i);
  return value;
}

}  // namespace

void requireNoArgument(const std::string& codec, const std::string& argument, const Codec* inner) {
  if (!argument.empty()) throw Error("codec \"" + codec + "\" takes no argument, got \"" + argument + "\"");
  if (inner) {
    throw Error("codec \"" + codec + "\" cannot follow '+' (only svd and topk take an inner codec), got \"" +
                inner->spec() + "+" + codec + "\"");
  }
}

at::Tensor floatInput(const std::string& codec, const at::Tensor& input) {
  if (!input.is_floating_point()) {
    throw Error("codec \"" + codec + "\" encodes floating-point tensors, got " + c10::toString(input.scalar_type()));
  }
  return input.detach().to(torch::kCPU, torch::kFloat).contiguous();
}

void requireFinite(const std::string& codec, const at::Tensor& x) {
  const float* p = x.data_ptr<float>();
  const int64_t n = x.numel();
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += !std::isfinite(p[i]);
  if (bad > 0) {
    throw Error("codec \"" + codec + "\": input has " + std::to_string(bad) +
                " NaN/Inf values, which it cannot represent (the run has diverged or needs a float codec)");
  }
}

void throwNonFiniteOrOverflow(const std::string& codec, const at::Tensor& x) {
  requireFinite(codec, x);
  throw Error(codec + ": rotating overflowed float32 (inputs near 3.4e38)");
}

EncodedTensor encodedHeader(const std::string& spec, const at::Tensor& input) {
  EncodedTensor out;
  out.codec = spec;
  out.dtype = toWireDType(input.scalar_type());
  out.shape = input.sizes().vec();
  return out;
}

void requirePayloadSize(const std::string& codec, const EncodedTensor& encoded, size_t expected) {
  if (encoded.payload.size() != expected) {
    throw WireError("codec \"" + codec + "\": payload is " + std::to_string(encoded.payload.size()) +
                    " bytes, shape " + std::to_string(elementCount(encoded.shape)) + " elements needs " +
                    std::to_string(expected));
  }
}

std::string packParts(const std::vector<std::string>& parts) {
  size_t total = packedOverhead(parts.size());
  for (const auto& p : parts) total += p.size();
  std::string out(packedOverhead(parts.size()), '\0');
  out.reserve(total);
  putLittle(out, 0, parts.size(), 4);
  for (size_t i = 0; i < parts.size(); ++i) putLittle(out, 4 + 8 * i, parts[i].size(), 8);
  for (const auto& p : parts) out += p;
  return out;
}

std::vector<std::string> unpackParts(const std::string& codec, const std::string& payload, size_t count) {
  if (payload.size() < packedOverhead(count) || getLittle(payload, 0, 4) != count) {
    throw WireError("codec \"" + codec + "\": payload does not hold its " + std::to_string(count) + " parts");
  }
  std::vector<std::string> parts;
  size_t offset = packedOverhead(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t length = getLittle(payload, 4 + 8 * i, 8);
    if (length > payload.size() - offset) throw WireError("codec \"" + codec + "\": part " + std::to_string(i) + " is truncated");
    parts.push_back(payload.substr(offset, length));
    offset += length;
  }
  if (offset != payload.size()) throw WireError("codec \"" + codec + "\": payload has trailing bytes");
  return parts;
}

std::string encodePart(Codec& inner, const at::Tensor& part) { return inner.encode(part).payload; }

at::Tensor decodePart(Codec& inner, std::string bytes, std::vector<int64_t> shape) {
  EncodedTensor encoded;
  encoded.codec = inner.spec();
  encoded.dtype = WireDType::Float32;
  encoded.shape = std::move(shape);
  encoded.payload = std::move(bytes);
  return inner.decode(encoded);
}

std::string chainSpec(const Codec& inner, const std::string& self) {
  const std::string innerSpec = inner.spec();
  return innerSpec == "none" ? self : innerSpec + "+" + self;
}

double parseFraction(const std::string& codec, const std::string& text, double low, double high) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !(value > low && value <= high)) {
    throw Error("codec \"" + codec + "\" needs a number in (" + std::to_string(low) + ", " + std::to_string(high) +
                "], got \"" + text + "\"");
  }
  return value;
}

}  // namespace skytrain::compression
