#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "client/export/safetensors_merge.h"
#include "compression/wire/safetensors_header.h"
#include "scheduler/error.h"

using namespace skytrain::client;

namespace {
std::string file(const nlohmann::json& header, const std::string& data) {
  const std::string text = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return out + text + data;
}
std::string write(const std::string& name, const std::string& bytes) {
  const std::string path = std::string("/tmp/skytrain_merge_test_") + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}
std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

TEST_CASE("two stages' files merge into one with every tensor's bytes") {
  const auto a = write("a", file({{"block0.w", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                                  {"__metadata__", {{"format", "pt"}}}},
                                 std::string("\x01\x00\x00\x00\x02\x00\x00\x00", 8)));
  const auto b = write("b", file({{"head.b", {{"dtype", "F16"}, {"shape", {1}}, {"data_offsets", {2, 4}}}},
                                  {"head.a", {{"dtype", "U8"}, {"shape", {2}}, {"data_offsets", {0, 2}}}}},
                                 "xy\x07\x08"));
  const std::string out = "/tmp/skytrain_merge_test_out.safetensors";
  REQUIRE(mergeSafetensors({a, b}, out, {{"skytrain_job", "0123456789abcdef"}}).tensors == 3);
  const std::string bytes = read(out);
  const auto h = skytrain::compression::parseSafetensorsHeader(bytes, bytes.size(), out);
  CHECK((8 + h.headerBytes) % 8 == 0);
  REQUIRE(h.tensors.size() == 3);
  CHECK(h.tensors[0].name == "block0.w");
  CHECK(h.tensors[1].name == "head.a");  // data order of its file
  CHECK(h.tensors[2].name == "head.b");
  CHECK(h.metadata.at("skytrain_job") == "0123456789abcdef");
  const std::string data = bytes.substr(8 + h.headerBytes);
  CHECK(data == std::string("\x01\x00\x00\x00\x02\x00\x00\x00", 8) + "xy\x07\x08");
  CHECK_THROWS_WITH(mergeSafetensors({a, a}, out, {}), Catch::Contains("block0.w") && Catch::Contains("two stages"));
  // A subspace model's frozen frame, which every stage holds alike, is written once; the
  // frame with other bytes is refused.
  const nlohmann::json frame = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
  const std::string bytes1("\x01\x00\x00\x00\x02\x00\x00\x00", 8), bytes2("\x01\x00\x00\x00\x03\x00\x00\x00", 8);
  const auto s0 = write("s0", file({{"subspace.basis", frame}}, bytes1));
  const auto s1 = write("s1", file({{"subspace.basis", frame}}, bytes1));
  const auto s2 = write("s2", file({{"subspace.basis", frame}}, bytes2));
  CHECK(mergeSafetensors({s0, b, s1}, out, {}).tensors == 3);
  const std::string once = read(out);
  const auto onceHeader = skytrain::compression::parseSafetensorsHeader(once, once.size(), out);
  CHECK(once.substr(8 + onceHeader.headerBytes) == bytes1 + "xy\x07\x08");
  CHECK_THROWS_WITH(mergeSafetensors({s0, s2}, out, {}), Catch::Contains("subspace.basis") && Catch::Contains("different values"));
}

TEST_CASE("crafted headers are refused before anything is copied") {
  auto refused = [](const std::string& bytes) {
    return skytrain::compression::parseSafetensorsHeader(bytes, bytes.size(), "crafted");
  };
  const nlohmann::json okEntry = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
  CHECK_THROWS_AS(refused("abc"), skytrain::WireError);
  std::string huge(8, '\xff');
  CHECK_THROWS_WITH(refused(huge), Catch::Contains("or the limit"));
  CHECK_THROWS_WITH(refused(file({{"w", okEntry}}, std::string(4, '\0'))), Catch::Contains("more bytes than the file has"));
  CHECK_THROWS_WITH(refused(file({{"w", okEntry}}, std::string(12, '\0'))), Catch::Contains("bytes after the last tensor"));
  CHECK_THROWS_WITH(refused(file({{"w", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 8}}}}}, std::string(8, '\0'))),
                    Catch::Contains("shape"));
  CHECK_THROWS_WITH(refused(file({{"w", {{"dtype", "Q7"}, {"shape", {2}}, {"data_offsets", {0, 8}}}}}, std::string(8, '\0'))),
                    Catch::Contains("dtype"));
  CHECK_THROWS_WITH(refused(file({{"w", okEntry}, {"v", okEntry}}, std::string(8, '\0'))), Catch::Contains("overlap"));
  CHECK_THROWS_WITH(refused(file({{"w", {{"dtype", "F32"}, {"shape", {-2}}, {"data_offsets", {0, 8}}}}}, std::string(8, '\0'))),
                    Catch::Contains("bad size"));
  CHECK_THROWS_WITH(refused(file(nlohmann::json::array(), "")), Catch::Contains("not a JSON object"));
}

TEST_CASE("an empty tensor at another's offset comes first in data order") {
  // Key order ("a" < "b" < "c") puts the 16-byte tensor before the empty one that starts
  // where it does; data order must not (the fuzzer's find).
  const std::string bytes = file({{"c", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 12}}}},
                                  {"a", {{"dtype", "I64"}, {"shape", {2}}, {"data_offsets", {12, 28}}}},
                                  {"b", {{"dtype", "F32"}, {"shape", {0, 3}}, {"data_offsets", {12, 12}}}}},
                                 std::string(28, '\0'));
  const auto h = skytrain::compression::parseSafetensorsHeader(bytes, bytes.size(), "crafted");
  REQUIRE(h.tensors.size() == 3);
  CHECK(h.tensors[0].name == "c");
  CHECK(h.tensors[1].name == "b");
  CHECK(h.tensors[2].name == "a");
}

TEST_CASE("a tied matrix two stages hold is written once; two copies that differ are both written") {
  const std::string w("\x01\x00\x00\x00\x02\x00\x00\x00", 8);
  const nlohmann::json entry = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}};
  const auto first = write("tied_first", file({{"tok_emb.weight", entry}}, w));
  const auto last = write("tied_last", file({{"norm.weight", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}},
                                             {"head.weight", entry}},
                                            w + std::string("\x03\x00\x00\x00\x04\x00\x00\x00", 8)));
  const std::string out = "/tmp/skytrain_merge_test_tied.safetensors";
  const std::vector<std::pair<std::string, std::string>> tied{{"tok_emb.weight", "head.weight"}};
  const MergedFile merged = mergeSafetensors({first, last}, out, {{"format", "pt"}}, tied);
  CHECK(merged.tensors == 2);
  CHECK(merged.keptApart.empty());
  const std::string bytes = read(out);
  const auto h = skytrain::compression::parseSafetensorsHeader(bytes, bytes.size(), out);
  REQUIRE(h.tensors.size() == 2);
  CHECK(h.tensors[0].name == "tok_emb.weight");
  CHECK(h.tensors[1].name == "norm.weight");
  CHECK(h.metadata.at("skytrain_tied") == "head.weight=tok_emb.weight");
  CHECK(bytes.substr(8 + h.headerBytes) == w + std::string("\x03\x00\x00\x00\x04\x00\x00\x00", 8));
  // Without the pair (an untied model), both are written.
  CHECK(mergeSafetensors({first, last}, out, {}).tensors == 3);

  // Copies that differ (one frozen by model.trainable while the other trained, or a stage
  // that sent another value): both are written, each as itself, and named.
  const auto other = write("tied_other", file({{"head.weight", entry}}, std::string("\x01\x00\x00\x00\x09\x00\x00\x00", 8)));
  const auto wider = write("tied_wider", file({{"head.weight", {{"dtype", "F16"}, {"shape", {4}}, {"data_offsets", {0, 8}}}}}, w));
  for (const auto& differing : {other, wider}) {
    const MergedFile apart = mergeSafetensors({first, differing}, out, {}, tied);
    CHECK(apart.tensors == 2);
    CHECK(apart.keptApart == std::vector<std::string>{"head.weight"});
    const std::string kept = read(out);
    const auto header = skytrain::compression::parseSafetensorsHeader(kept, kept.size(), out);
    CHECK(header.metadata.count("skytrain_tied") == 0);
    CHECK(kept.substr(8 + header.headerBytes) == w + read(differing).substr(read(differing).size() - 8));
  }
}
