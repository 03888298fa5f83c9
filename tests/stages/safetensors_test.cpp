// stages/weights/safetensors.h: round trips of every dtype, the exact byte layout, files exchanged
// with Python in both directions, and one refusal per check the reader makes.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "scheduler/error.h"
#include "stages/weights/safetensors.h"

using namespace skytrain::stages;
using Catch::Matchers::Contains;

namespace {

std::string dataFile(const std::string& name) {
  std::ifstream in(std::string(SKYTRAIN_SOURCE_DIR) + "/tests/stages/data/" + name, std::ios::binary);
  REQUIRE(in);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string littleEndian64(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

// A file as a hostile writer crafts it: any header text, any data.
std::string craft(const std::string& header, const std::string& data = "") {
  return littleEndian64(header.size()) + header + data;
}

std::map<std::string, at::Tensor> byName(const SafeTensors& file) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, tensor] : file.tensors) out[name] = tensor;
  return out;
}

// What decodeSafetensors says when it refuses `bytes`, less the prefix naming the file.
std::string refusal(const std::string& bytes) {
  const std::string prefix = "safetensors file crafted.safetensors: ";
  try {
    decodeSafetensors(bytes, "crafted.safetensors");
  } catch (const skytrain::WireError& e) {
    const std::string what = e.what();
    return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : "(file not named) " + what;
  }
  return "(accepted)";
}

// The tensors of tests/stages/data/safetensors_by_hand.py, in the order of its data.
SafeTensors pythonTensors() {
  SafeTensors file;
  file.tensors = {
      {"step", torch::tensor(int64_t{1234567890123})},
      {"embed.weight", torch::tensor({0.5f, -1.0f, 2.25f, 3.0f, -0.125f, 100.0f}).reshape({2, 3})},
      {"ids", torch::tensor({-7, 0, 2147483647}, torch::kInt)},
      {"ln.bias", torch::tensor({1.0f, -2.0f, 0.5f, 65504.0f}).to(torch::kHalf)},
      {"ln.weight", torch::tensor({1.5f, -3.0f}).to(torch::kBFloat16)},
      {"small", torch::tensor({-128, 127, 0, -1}, torch::kChar).reshape({2, 2})},
      {"mask", torch::tensor({0, 1, 255}, torch::kByte)},
      {"empty", torch::zeros({0, 4})},
  };
  file.metadata = {{"format", "pt"}, {"writer", "python"}};
  return file;
}

void requireSame(const SafeTensors& actual, const SafeTensors& expected) {
  const auto tensors = byName(actual);
  REQUIRE(tensors.size() == expected.tensors.size());
  for (const auto& [name, tensor] : expected.tensors) {
    INFO(name);
    REQUIRE(tensors.count(name));
    const at::Tensor& got = tensors.at(name);
    CHECK(got.scalar_type() == tensor.scalar_type());
    CHECK(got.sizes() == tensor.sizes());
    CHECK(torch::equal(got, tensor));
  }
  CHECK(actual.metadata == expected.metadata);
}

}  // namespace

TEST_CASE("every dtype survives a round trip, contiguous or not, with its metadata") {
  const auto dtype = GENERATE(torch::kFloat, torch::kHalf, torch::kBFloat16, torch::kLong, torch::kInt, torch::kChar,
                              torch::kByte);
  INFO(c10::toString(dtype));
  torch::manual_seed(3);
  const at::Tensor base = c10::isFloatingType(dtype) ? (torch::randn({4, 6}) * 10).to(dtype)
                                                     : torch::arange(24, torch::kLong).reshape({4, 6}).to(dtype);
  SafeTensors file;
  file.tensors = {{"plain", base}, {"transposed", base.t()}, {"strided", base.slice(1, 0, 6, 2)}};
  REQUIRE_FALSE(base.t().is_contiguous());
  REQUIRE_FALSE(base.slice(1, 0, 6, 2).is_contiguous());
  file.metadata = {{"format", "pt"}, {"step", "17"}, {"note", "gr\xc3\xbc\xc3\x9f \"quoted\"\n"}};

  const SafeTensors decoded = decodeSafetensors(encodeSafetensors(file), "round-trip");
  requireSame(decoded, file);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : decoded.tensors) {
    names.push_back(name);
    CHECK(tensor.is_contiguous());
  }
  CHECK(names == std::vector<std::string>{"plain", "transposed", "strided"});  // file order, not sorted
  CHECK(byName(decoded).at("transposed").sizes().vec() == std::vector<int64_t>{6, 4});
}

TEST_CASE("scalars, zero-size tensors and an empty file survive a round trip") {
  SafeTensors file;
  file.tensors = {{"scalar", torch::tensor(2.5f)}, {"none", torch::zeros({0, 3}, torch::kLong)}, {"one", torch::ones({1})}};
  requireSame(decodeSafetensors(encodeSafetensors(file), "round-trip"), file);

  const SafeTensors empty = decodeSafetensors(encodeSafetensors({}), "empty");
  CHECK(empty.tensors.empty());
  CHECK(empty.metadata.empty());
  CHECK(encodeSafetensors({}) == craft("{}      "));
}

TEST_CASE("a tiny file has the documented byte layout") {
  // One tensor: the length, the JSON header padded with spaces to a multiple of 8, the data.
  SafeTensors one;
  one.tensors = {{"a", torch::tensor({1.0f, -2.0f})}};
  const std::string header = R"({"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]}})";
  REQUIRE(header.size() == 54);
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);  // 1.0f, -2.0f little-endian
  const std::string bytes = encodeSafetensors(one);
  CHECK(bytes.size() == 8 + 56 + 8);
  CHECK(bytes.substr(0, 8) == std::string("\x38\0\0\0\0\0\0\0", 8));
  CHECK(bytes.substr(8, 56) == header + "  ");
  CHECK(bytes.substr(64) == data);

  // Two tensors and metadata: offsets follow the order given, relative to the data part.
  SafeTensors two;
  two.tensors = {{"a", torch::tensor({1.0f, -2.0f})}, {"b", torch::tensor(uint8_t{7})}};
  two.metadata = {{"step", "3"}};
  const std::string twoHeader = R"({"__metadata__":{"step":"3"},"a":{"data_offsets":[0,8],"dtype":"F32","shape":[2]},)"
                                R"("b":{"data_offsets":[8,9],"dtype":"U8","shape":[]}})";
  REQUIRE(twoHeader.size() == 133);
  CHECK(encodeSafetensors(two) == craft(twoHeader + "   ", data + "\x07"));
}

TEST_CASE("a file Python wrote decodes to its values") {
  // Written by: /usr/bin/python3 tests/stages/data/safetensors_by_hand.py write tests/stages/data/from_python.safetensors
  const SafeTensors file = decodeSafetensors(dataFile("from_python.safetensors"), "from_python.safetensors");
  requireSame(file, pythonTensors());
  std::vector<std::string> names;
  for (const auto& [name, tensor] : file.tensors) names.push_back(name);
  CHECK(names == std::vector<std::string>{"step", "embed.weight", "ids", "ln.bias", "ln.weight", "small", "mask", "empty"});
  const auto tensors = byName(file);
  CHECK(tensors.at("step").item<int64_t>() == 1234567890123);
  CHECK(tensors.at("ln.bias")[3].item<float>() == 65504.0f);
  CHECK(tensors.at("ln.weight")[1].item<float>() == -3.0f);
  CHECK(tensors.at("mask")[2].item<int64_t>() == 255);
  CHECK(tensors.at("small")[0][0].item<int64_t>() == -128);
}

TEST_CASE("Python reads what encodeSafetensors writes") {
  // from_cpp.safetensors is encodeSafetensors(pythonTensors()), written once and read by a
  // Python reader that knows only the spec:
  //   /usr/bin/python3 tests/stages/data/safetensors_by_hand.py check tests/stages/data/from_cpp.safetensors
  // prints "8 tensors and the metadata as expected". Today's encoding must still be that file.
  CHECK(encodeSafetensors(pythonTensors()) == dataFile("from_cpp.safetensors"));
}

TEST_CASE("a file shorter than its header length is refused") {
  CHECK(refusal(std::string(7, '\0')) == "is 7 bytes, shorter than its 8-byte header length");
  CHECK(refusal("") == "is 0 bytes, shorter than its 8-byte header length");
  const std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  CHECK_THAT(refusal(littleEndian64(100) + header), Contains("header length 100 exceeds the file (61 bytes)"));
  CHECK_THAT(refusal(littleEndian64(uint64_t{1} << 63) + header), Contains("header length 9223372036854775808 exceeds"));
  // Over the limit, whatever the file's size: nothing that large is even looked at.
  CHECK_THAT(refusal(littleEndian64(kMaxSafetensorsHeader + 1) + std::string(kMaxSafetensorsHeader + 1, ' ')),
             Contains("header length 67108865 exceeds"));
}

TEST_CASE("a header that is not a JSON object of unique keys is refused") {
  CHECK_THAT(refusal(craft(R"({"a": {"dtype": "U8",)")), Contains("header is not valid JSON"));
  CHECK_THAT(refusal(craft("{\"a\": 1e999}")), Contains("header is not valid JSON"));
  CHECK(refusal(craft("[1, 2]")) == "header is not a JSON object");
  CHECK(refusal(craft(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],)"
                      R"("data_offsets":[1,2]}})",
                      "xy")) == "header repeats the key \"a\"");
  CHECK(refusal(craft(R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "x")) ==
        "header repeats the key \"dtype\"");
  CHECK(refusal(craft(R"({"a":{"b":{"c":{"d":{"e":1}}}}})")) == "header nested too deep");
}

TEST_CASE("a tensor with an unknown dtype or a shape the file cannot hold is refused") {
  CHECK_THAT(refusal(craft(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0'))),
             Contains("tensor \"w\": unsupported dtype \"F64\""));
  CHECK_THAT(refusal(craft(R"({"w":{"dtype":"F32","shape":[1]}})")), Contains("tensor \"w\": expected {dtype, shape, data_offsets}"));
  CHECK(refusal(craft(R"({"w":{"dtype":"F32","shape":[1000000],"data_offsets":[0,4000000]}})", std::string(8, '\0'))) ==
        "tensor \"w\": its shape needs more bytes than the file has");
  // The product of the sizes is bounded as it is multiplied in, so a product that would
  // overflow 64 bits is never formed — also behind a zero size (found by fuzzing: an empty
  // tensor of sizes 2^40 x 2^40 x 2^40 overflowed LibTorch's strides).
  CHECK(refusal(craft(R"({"w":{"dtype":"U8","shape":[2,1099511627776,1099511627776],"data_offsets":[0,2]}})", "xy")) ==
        "tensor \"w\": its shape has more than 2^48 elements");
  CHECK(refusal(craft(R"({"w":{"dtype":"F32","shape":[0,1099511627776,1099511627776,1099511627776],"data_offsets":[0,0]}})")) ==
        "tensor \"w\": its shape has more than 2^48 elements");
  CHECK(refusal(craft(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", "x")) ==
        "tensor \"w\": bad size in its shape");
  CHECK(refusal(craft(R"({"w":{"dtype":"U8","shape":[1099511627777],"data_offsets":[0,1]}})", "x")) ==
        "tensor \"w\": bad size in its shape");
}

TEST_CASE("data_offsets must tile the data part exactly") {
  const std::string eight(8, '\x01');
  CHECK(refusal(craft(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", eight)) ==
        "tensor \"w\": data_offsets [4, 12) lie outside the data (8 bytes)");
  CHECK(refusal(craft(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", eight)) ==
        "tensor \"w\": data_offsets [8, 4) lie outside the data (8 bytes)");
  CHECK(refusal(craft(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", eight)) ==
        "tensor \"w\": data_offsets span 8 bytes, its shape and dtype need 4");
  // Overlap: both tensors claim bytes [2, 4).
  CHECK(refusal(craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                      eight)) == "tensor data overlap or leave a gap at byte 4");
  // Gap: nothing claims bytes [4, 6).
  CHECK(refusal(craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"I8","shape":[2],"data_offsets":[6,8]}})",
                      eight)) == "tensor data overlap or leave a gap at byte 4");
  // The same bytes claimed twice.
  CHECK(refusal(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                      eight)) == "tensor data overlap or leave a gap at byte 8");
  CHECK(refusal(craft(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight)) ==
        "4 bytes after the last tensor");
  CHECK(refusal(craft("{}", "x")) == "1 bytes after the last tensor");
}

TEST_CASE("metadata must map strings to strings") {
  CHECK(refusal(craft(R"({"__metadata__":{"format":"pt","step":3}})")) == "metadata \"step\" is not a string");
  CHECK(refusal(craft(R"({"__metadata__":{"nested":{"a":"b"}}})")) == "metadata \"nested\" is not a string");
  CHECK(refusal(craft(R"({"__metadata__":["pt"]})")) == "__metadata__ is not an object");
  const SafeTensors ok = decodeSafetensors(craft(R"({"__metadata__":{"format":"pt","":"empty key"}})"), "ok");
  const std::map<std::string, std::string> expected = {{"format", "pt"}, {"", "empty key"}};
  CHECK(ok.metadata == expected);
}
