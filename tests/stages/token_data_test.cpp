// Pre-tokenised corpora: files an independent writer made (tests/stages/token_reference.py,
// from nanoGPT's and Megatron's published layouts) read back token for token; the same
// tokens as plain text give the same batches; shards, blends, held-out tails; and every
// malformed file refused with its name and the byte offset, never a crash.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "scheduler/error.h"
#include "stages/data/text_data.h"
#include "stages/data/token_data.h"
#include "stages/tokens/token_files.h"
#include "stages/tokens/token_manifest.h"

using namespace skytrain::stages;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  const auto dir = fs::temp_directory_path() / ("skytrain-token-test-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string readAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void writeAll(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

template <typename T>
void writeFlat(const fs::path& path, const std::vector<T>& ids) {
  writeAll(path, std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(T)));
}

template <typename T>
void patch(const fs::path& path, size_t offset, T value) {
  auto bytes = readAll(path);
  std::memcpy(&bytes[offset], &value, sizeof value);
  writeAll(path, bytes);
}

TokenDataOptions options(std::vector<std::string> files, int seqLen = 16, int vocab = 65536) {
  TokenDataOptions o;
  o.sources = {{std::move(files), 1.0}};
  o.seqLen = seqLen;
  o.vocabSize = vocab;
  o.seed = 3;
  return o;
}

}  // namespace

TEST_CASE("files the independent reference wrote read back token for token") {
  const auto dir = scratch("reference");
  const std::string command = std::string(SKYTRAIN_TORCH_PYTHON) + " " + SKYTRAIN_SOURCE_DIR +
                              "/tests/stages/token_reference.py write " + dir.string();
  REQUIRE(std::system(command.c_str()) == 0);
  std::vector<int64_t> expected;
  std::istringstream words(readAll(dir / "expected.txt"));
  for (int64_t id; words >> id;) expected.push_back(id);
  REQUIRE(expected.size() > 1000);

  const TokenFile megatron((dir / "megatron.bin").string(), TokenDtype::U32);  // the index's dtype wins
  const TokenFile megatron32((dir / "megatron32.bin").string(), TokenDtype::U16);
  const TokenFile flat16((dir / "flat16.bin").string(), TokenDtype::U16);
  const TokenFile flat32((dir / "flat32.dat").string(), TokenDtype::U32);
  CHECK(megatron.indexed());
  CHECK(megatron.dtype() == TokenDtype::U16);
  CHECK(megatron32.dtype() == TokenDtype::I32);
  CHECK(megatron.documents() == 50);
  CHECK_FALSE(flat16.indexed());
  for (const TokenFile* f : {&megatron, &megatron32, &flat16, &flat32}) {
    INFO(f->path());
    REQUIRE(f->tokens() == expected.size());
    bool same = true;
    for (size_t i = 0; i < expected.size(); ++i) same = same && f->tokenAt(i) == expected[i];
    CHECK(same);
  }
}

TEST_CASE("our writer's shards are what the reader and the reference read") {
  const auto dir = scratch("writer");
  std::vector<std::vector<int32_t>> docs = {{1, 2, 3}, {}, {65535, 0, 7, 9}, {42}};
  {
    TokenShardWriter w((dir / "s.bin").string(), TokenDtype::U16, true);
    for (const auto& d : docs) w.append(d);
    CHECK_THROWS_WITH(w.append({65536}), Catch::Contains("does not fit uint16"));
    w.finish();
  }
  const TokenFile f((dir / "s.bin").string(), TokenDtype::U16);
  CHECK(f.documents() == 4);
  CHECK(f.tokens() == 8);
  CHECK(f.tokenAt(3) == 65535);
  CHECK(f.tokenAt(7) == 42);
  // Nothing left behind under a temporary name; an abandoned shard leaves nothing at all.
  CHECK_FALSE(fs::exists(dir / "s.bin.tmp"));
  { TokenShardWriter abandoned((dir / "t.bin").string(), TokenDtype::U16, true); abandoned.append({1}); }
  CHECK_FALSE(fs::exists(dir / "t.bin"));
  CHECK_FALSE(fs::exists(dir / "t.bin.tmp"));
  CHECK_THROWS_WITH(TokenShardWriter((dir / "u.bin").string(), TokenDtype::U32, true), Catch::Contains("Megatron"));
}

TEST_CASE("the same tokens as plain text and as a token file give the same batches") {
  // The byte tokenizer's ids of the Bible, as a flat uint16 file: TextDataSource and
  // TokenDataSource must draw the same windows for every (seed, step, sample).
  const auto dir = scratch("equal");
  const auto text = readAll(SKYTRAIN_TEST_CORPUS);
  std::vector<uint16_t> ids(text.begin(), text.end());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  writeFlat(dir / "web.u16", ids);

  TextDataOptions t;
  t.files = {SKYTRAIN_TEST_CORPUS};
  t.seqLen = 64;
  t.seed = 9;
  TextDataSource plain(t);
  auto o = options({(dir / "web.u16").string()}, 64, 256);
  o.seed = 9;
  TokenDataSource mapped(o);
  CHECK(mapped.trainTokens() == plain.trainTokens());
  CHECK(mapped.validationTokens() == plain.validationTokens());
  CHECK(mapped.tokenizer().name() == "byte");
  for (uint64_t step : {0, 1, 77, 1000000}) {
    const auto a = plain.trainBatch(step, 0, 8), b = mapped.trainBatch(step, 0, 8);
    CHECK(torch::equal(a.inputs, b.inputs));
    CHECK(torch::equal(a.targets, b.targets));
  }
  CHECK(torch::equal(plain.validationBatch(0, 16).inputs, mapped.validationBatch(0, 16).inputs));
}

TEST_CASE("windows stay inside one shard, sources are drawn by weight, the tail is held out") {
  const auto dir = scratch("shards");
  std::vector<uint16_t> a(5000), b(3000), c(4000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 1000 + i % 7;   // shard 1 of source 0
  for (size_t i = 0; i < b.size(); ++i) b[i] = 2000 + i % 5;   // shard 2 of source 0
  for (size_t i = 0; i < c.size(); ++i) c[i] = 3000 + i % 3;   // source 1
  writeFlat(dir / "a.bin", a);
  writeFlat(dir / "b.bin", b);
  writeFlat(dir / "c.bin", c);
  TokenDataOptions o = options({(dir / "a.bin").string(), (dir / "b.bin").string()});
  o.sources.push_back({{(dir / "c.bin").string()}, 1.0});
  o.sources[0].weight = 3.0;
  o.validationFraction = 0.1;
  TokenDataSource data(o);
  CHECK(data.trainTokens() == 8000 - 800 + 4000 - 400);
  int counts[4] = {};
  for (uint64_t step = 0; step < 100; ++step) {
    const auto batch = data.trainBatch(step, 0, 40);
    for (int j = 0; j < 40; ++j) {
      const auto row = torch::cat({batch.inputs[j], batch.targets[j].slice(0, -1)});
      const int64_t lo = row.min().item<int64_t>() / 1000, hi = row.max().item<int64_t>() / 1000;
      REQUIRE(lo == hi);  // one shard's tokens only
      counts[lo]++;
    }
  }
  // 4000 samples: source 0 (shards 1 and 2) three times as often as source 1.
  CHECK((counts[1] + counts[2]) / 4000.0 == Approx(0.75).margin(0.03));
  // The validation tail of source 0 is the end of its last shard: only 2000s.
  for (int j = 0; j < 64; ++j) {
    const auto batch = data.validationBatch(j, 1);
    const int64_t lo = batch.inputs.min().item<int64_t>() / 1000;
    CHECK((lo == 2 || lo == 3));
  }
  // The tail is not trained on: source 0's train windows end 800 tokens before b's end.
  CHECK(data.fingerprint().size() == 16);
}

TEST_CASE("malformed token files are refused with the file and the byte offset") {
  const auto dir = scratch("hostile");
  std::vector<std::vector<int32_t>> docs = {{1, 2, 3, 4}, {5, 6}, {7, 8, 9}};
  auto make = [&](const std::string& name) {
    TokenShardWriter w((dir / (name + ".bin")).string(), TokenDtype::U16, true);
    for (const auto& d : docs) w.append(d);
    w.finish();
    return dir / (name + ".bin");
  };
  auto refused = [](const fs::path& bin, const std::string& what) {
    try {
      TokenFile f(bin.string(), TokenDtype::U16);
      FAIL("accepted " << bin);
    } catch (const skytrain::Error& e) {
      INFO(e.what());
      CHECK_THAT(e.what(), Catch::Contains(what));
      CHECK_THAT(e.what(), Catch::Contains(bin.stem().string()));
      CHECK_THAT(e.what(), Catch::Contains("byte"));
    }
  };
  // Offsets in the index: header 34, lengths at 34, pointers at 34 + 12, starts at 34 + 36.
  SECTION("a truncated flat file") {
    writeAll(dir / "odd.bin", std::string(7, '\1'));
    refused(dir / "odd.bin", "not a whole number of uint16 tokens");
  }
  SECTION("a truncated .bin under its index") {
    const auto bin = make("short");
    fs::resize_file(bin, 12);
    refused(bin, "past the end");
  }
  SECTION("a wrong dtype code") {
    const auto bin = make("dtype");
    patch(fs::path(bin).replace_extension(".idx"), 17, uint8_t{7});  // float32
    refused(bin, "not an integer token type");
  }
  SECTION("a pointer past the end") {
    const auto bin = make("pointer");
    patch(fs::path(bin).replace_extension(".idx"), 34 + 12 + 16, int64_t{1} << 40);
    refused(bin, "starts at byte 1099511627776");
  }
  SECTION("a length past the end") {
    const auto bin = make("length");
    patch(fs::path(bin).replace_extension(".idx"), 34 + 8, int32_t{1000000});
    refused(bin, "past the end");
  }
  SECTION("counts that would overflow") {
    const auto bin = make("counts");
    patch(fs::path(bin).replace_extension(".idx"), 18, uint64_t{0x2000000000000001ULL});
    refused(bin, "do not fit");
  }
  SECTION("document boundaries out of order") {
    const auto bin = make("starts");
    patch(fs::path(bin).replace_extension(".idx"), 34 + 36 + 8, int64_t{5});
    refused(bin, "document boundary 1");
  }
  SECTION("not an index at all") {
    const auto bin = make("magic");
    writeAll(fs::path(bin).replace_extension(".idx"), "PK\3\4 not an index, long enough to have a header");
    refused(bin, "MMIDIDX");
  }
  SECTION("bytes the index does not describe") {
    const auto bin = make("extra");
    std::ofstream(bin, std::ios::binary | std::ios::app) << "xy";
    refused(bin, "does not describe");
  }
  SECTION("a token outside the vocabulary, found when a batch reads it") {
    writeFlat(dir / "big.bin", std::vector<uint16_t>(2000, 40000));
    TokenDataSource data(options({(dir / "big.bin").string()}, 16, 32000));
    CHECK_THROWS_WITH(data.trainBatch(0, 0, 1),
                      Catch::Contains("token id 40000 at byte") && Catch::Contains("big.bin") &&
                          Catch::Contains("vocabulary of 32000"));
  }
  SECTION("a source too short for one window") {
    writeFlat(dir / "tiny.bin", std::vector<uint16_t>(10, 1));
    CHECK_THROWS_WITH(TokenDataSource(options({(dir / "tiny.bin").string()})), Catch::Contains("no training shard part"));
  }
}

TEST_CASE("a manifest names plain files only") {
  const auto dir = scratch("manifest");
  TokenManifest m;
  m.train = {"train-00000.bin"};
  writeAll(dir / kTokenManifestName, tokenManifestJson(m));
  CHECK(isTokenDirectory(dir.string()));
  CHECK(readTokenManifest(dir.string()).train == m.train);
  m.train = {"../../etc/passwd"};
  writeAll(dir / kTokenManifestName, tokenManifestJson(m));
  CHECK_THROWS_WITH(readTokenManifest(dir.string()), Catch::Contains("not a plain file name"));
  writeAll(dir / kTokenManifestName, "{\"format\": \"skytrain-tokens\", \"version\": 1, \"layout\": 5}");
  CHECK_THROWS_AS(readTokenManifest(dir.string()), skytrain::WireError);
}
