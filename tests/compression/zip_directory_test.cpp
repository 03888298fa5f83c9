#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "compression/wire/zip_directory.h"
#include "scheduler/error.h"

using namespace skytrain::compression;
using skytrain::WireError;
namespace fs = std::filesystem;

#ifndef SKYTRAIN_TORCH_PYTHON
#define SKYTRAIN_TORCH_PYTHON "/usr/bin/python3"  // Debian's python3-torch, tests/CMakeLists.txt's default
#endif

namespace {

// Archives from an independent writer, Python's zipfile, written once per run.
constexpr char kWriteArchives[] = R"(
import sys, zipfile
d = sys.argv[1]
with zipfile.ZipFile(d + '/stored.zip', 'w', zipfile.ZIP_STORED) as z:
    z.writestr('a.txt', b'hello')
    z.writestr('dir/b.bin', bytes(range(256)) * 4)
with zipfile.ZipFile(d + '/deflated.zip', 'w', zipfile.ZIP_DEFLATED) as z:
    z.writestr('text.txt', b'skytrain ' * 1000)
    z.writestr('empty', b'')
with zipfile.ZipFile(d + '/bomb.zip', 'w', zipfile.ZIP_DEFLATED, compresslevel=9) as z:
    z.writestr('zeros', bytes(64 << 20))
with zipfile.ZipFile(d + '/forced64.zip', 'w') as z:
    with z.open('big', 'w', force_zip64=True) as f:
        f.write(b'x' * 1000)
)";

// Python's zipfile reads an archive, checks every member's CRC and the sizes given as
// name=size arguments.
constexpr char kCheckArchive[] = R"(
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
assert z.testzip() is None
assert {i.filename: i.file_size for i in z.infolist()} == {a.split('=')[0]: int(a.split('=')[1]) for a in sys.argv[2:]}
)";

constexpr char kWriteTorchScript[] = R"(
import sys, torch
torch.jit.script(torch.nn.Linear(64, 64)).save(sys.argv[1])
)";

struct Scratch {  // a temporary directory for the run, removed at exit
  fs::path dir = fs::temp_directory_path() / ("skytrain_zip_test_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
};

fs::path scratch(const std::string& name) {
  static const Scratch s;
  return s.dir / name;
}

std::string readFile(const fs::path& path) {
  std::ostringstream out;
  out << std::ifstream(path, std::ios::binary).rdbuf();
  return out.str();
}

fs::path writeFile(const std::string& name, const std::string& bytes) {
  std::ofstream(scratch(name), std::ios::binary) << bytes;
  return scratch(name);
}

bool runPython(const std::string& python, const char* script, const std::string& args) {
  const fs::path file = writeFile("script.py", script);
  return std::system((python + " " + file.string() + " " + args + " 2>/dev/null").c_str()) == 0;
}

fs::path pythonArchive(const std::string& name) {
  static const bool written = runPython("python3", kWriteArchives, scratch("").string());
  REQUIRE(written);
  return scratch(name);
}

// A little-endian byte writer for crafted archives.
struct Bytes {
  std::string s;
  Bytes& put(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) s += static_cast<char>(v >> (8 * i));
    return *this;
  }
  Bytes& u16(uint64_t v) { return put(v, 2); }
  Bytes& u32(uint64_t v) { return put(v, 4); }
  Bytes& u64(uint64_t v) { return put(v, 8); }
  Bytes& raw(const std::string& bytes) { return s += bytes, *this; }
};

void patch(std::string& bytes, size_t at, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) bytes[at + i] = static_cast<char>(v >> (8 * i));
}

uint32_t crc32(const std::string& data) {
  uint32_t crc = 0xFFFFFFFF;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320 & (0 - (crc & 1)));
  }
  return ~crc;
}

struct Member {
  std::string name, data;   // stored: the data is the member's bytes
  bool zip64 = false;       // its sizes and offset in a zip64 extra field, 0xFFFFFFFF in the entry
  int zip64Fields = 3;      // how many of those three the extra field holds; 0: no field
  uint64_t claimed = 0;     // the uncompressed size the directory gives, if not the data's
};

// A stored archive laid out as a ZIP writer does, with a zip64 end record and locator when asked.
std::string buildZip(const std::vector<Member>& members, bool zip64End) {
  Bytes out, directory;
  for (const auto& m : members) {
    const uint64_t at = out.s.size(), size = m.data.size(), claimed = m.claimed ? m.claimed : size;
    out.u32(0x04034b50).u16(45).u16(0).u16(0).u32(0).u32(crc32(m.data)).u32(size).u32(size);
    out.u16(m.name.size()).u16(0).raw(m.name).raw(m.data);
    Bytes extra;
    if (m.zip64 && m.zip64Fields > 0) {
      const uint64_t values[] = {claimed, size, at};
      extra.u16(1).u16(8 * m.zip64Fields);
      for (int i = 0; i < m.zip64Fields; ++i) extra.u64(values[i]);
    }
    const auto field = [&](uint64_t v) { return m.zip64 ? 0xFFFFFFFF : v; };
    directory.u32(0x02014b50).u16(45).u16(45).u16(0).u16(0).u32(0).u32(crc32(m.data));
    directory.u32(field(size)).u32(field(claimed)).u16(m.name.size()).u16(extra.s.size()).u16(0).u16(0).u16(0).u32(0);
    directory.u32(field(at)).raw(m.name).raw(extra.s);
  }
  const uint64_t directoryAt = out.s.size(), entries = members.size();
  out.raw(directory.s);
  if (zip64End) {
    const uint64_t recordAt = out.s.size();
    out.u32(0x06064b50).u64(44).u16(45).u16(45).u32(0).u32(0).u64(entries).u64(entries);
    out.u64(directory.s.size()).u64(directoryAt);
    out.u32(0x07064b50).u32(0).u64(recordAt).u32(1);
  }
  const auto field = [&](uint64_t v, uint64_t max) { return zip64End ? max : v; };
  out.u32(0x06054b50).u16(0).u16(0).u16(field(entries, 0xFFFF)).u16(field(entries, 0xFFFF));
  out.u32(field(directory.s.size(), 0xFFFFFFFF)).u32(field(directoryAt, 0xFFFFFFFF)).u16(0);
  return out.s;
}

// Both readers, the file's and the bytes', must agree.
ZipDirectory readBoth(const fs::path& path) {
  const ZipDirectory fromFile = readZipDirectory(path.string());
  const ZipDirectory fromBytes = parseZipDirectory(readFile(path), path.string());
  REQUIRE(fromFile.entries.size() == fromBytes.entries.size());
  for (size_t i = 0; i < fromFile.entries.size(); ++i) {
    CHECK(fromFile.entries[i].name == fromBytes.entries[i].name);
    CHECK(fromFile.entries[i].compressedBytes == fromBytes.entries[i].compressedBytes);
    CHECK(fromFile.entries[i].uncompressedBytes == fromBytes.entries[i].uncompressedBytes);
    CHECK(fromFile.entries[i].method == fromBytes.entries[i].method);
  }
  CHECK(fromFile.uncompressedBytes == fromBytes.uncompressedBytes);
  return fromFile;
}

// Hostile bytes are refused with WireError or parse to a directory whose sum adds up.
void refusedOrConsistent(const std::string& bytes) {
  try {
    const ZipDirectory d = parseZipDirectory(bytes, "crafted");
    uint64_t sum = 0;
    for (const auto& e : d.entries) sum += e.uncompressedBytes;
    CHECK(sum == d.uncompressedBytes);
  } catch (const WireError&) {
    // the documented refusal
  }
}

std::string refusal(const std::string& bytes) {
  try {
    parseZipDirectory(bytes, "crafted.zip");
  } catch (const WireError& e) {
    return e.what();
  }
  return "(parsed)";
}

}  // namespace

TEST_CASE("a stored archive from Python's zipfile: names, methods and sizes") {
  const ZipDirectory d = readBoth(pythonArchive("stored.zip"));
  REQUIRE(d.entries.size() == 2);
  CHECK(d.entries[0].name == "a.txt");
  CHECK(d.entries[0].method == 0);
  CHECK(d.entries[0].compressedBytes == 5);
  CHECK(d.entries[0].uncompressedBytes == 5);
  CHECK(d.entries[1].name == "dir/b.bin");
  CHECK(d.entries[1].uncompressedBytes == 1024);
  CHECK(d.uncompressedBytes == 1029);
}

TEST_CASE("a deflated archive is counted at its inflated sizes") {
  const ZipDirectory d = readBoth(pythonArchive("deflated.zip"));
  REQUIRE(d.entries.size() == 2);
  CHECK(d.entries[0].method == 8);
  CHECK(d.entries[0].uncompressedBytes == 9000);
  CHECK(d.entries[0].compressedBytes < 200);
  CHECK(d.entries[1].uncompressedBytes == 0);
  CHECK(d.uncompressedBytes == 9000);
}

TEST_CASE("a deflate bomb is counted at what it inflates to, not its size on disk") {
  const fs::path bomb = pythonArchive("bomb.zip");
  CHECK(fs::file_size(bomb) < (1 << 20));
  const ZipDirectory d = readBoth(bomb);
  REQUIRE(d.entries.size() == 1);
  CHECK(d.entries[0].compressedBytes < (1 << 20));
  CHECK(d.uncompressedBytes == uint64_t{64} << 20);
}

TEST_CASE("ZIP64: sizes and offsets in zip64 extra fields, the directory found through the zip64 end record") {
  const std::vector<Member> members = {{"small", "abc"}, {"wide", std::string(300, 'w'), true}, {"plain", "", false}};
  const std::string zip = buildZip(members, true);
  const fs::path path = writeFile("zip64.zip", zip);
  // The crafted layout is a real ZIP64 archive to an independent reader.
  CHECK(runPython("python3", kCheckArchive, path.string() + " small=3 wide=300 plain=0"));
  const ZipDirectory d = readBoth(path);
  REQUIRE(d.entries.size() == 3);
  CHECK(d.entries[1].name == "wide");
  CHECK(d.entries[1].compressedBytes == 300);
  CHECK(d.entries[1].uncompressedBytes == 300);
  CHECK(d.uncompressedBytes == 303);
  // Python's force_zip64 puts zip64 fields in the local header only: the directory is plain.
  const ZipDirectory forced = readBoth(pythonArchive("forced64.zip"));
  REQUIRE(forced.entries.size() == 1);
  CHECK(forced.uncompressedBytes == 1000);
}

TEST_CASE("a TorchScript module saved by PyTorch is counted at least at its weights") {
  const fs::path path = scratch("linear.pt");
  if (!runPython(SKYTRAIN_TORCH_PYTHON, kWriteTorchScript, path.string())) {
    WARN("no torch in " SKYTRAIN_TORCH_PYTHON ": the TorchScript case is not checked");
    return;
  }
  const ZipDirectory d = readBoth(path);  // PyTorch writes a zip64 end record even for small files
  bool pickle = false, weight = false;
  for (const auto& e : d.entries) {
    pickle = pickle || (e.name.size() >= 8 && e.name.compare(e.name.size() - 8, 8, "data.pkl") == 0);
    weight = weight || e.uncompressedBytes == 64 * 64 * 4;
  }
  CHECK(pickle);
  CHECK(weight);
  CHECK(d.uncompressedBytes >= 64 * 64 * 4);
}

TEST_CASE("an empty file, random bytes and every prefix of an archive are refused") {
  CHECK_THROWS_AS(parseZipDirectory("", "empty"), WireError);
  CHECK_THROWS_WITH(readZipDirectory(writeFile("empty.zip", "").string()), Catch::Contains("empty.zip"));
  std::mt19937 random(7);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(random() % 400, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    CHECK_THROWS_AS(parseZipDirectory(bytes, "random"), WireError);
  }
  for (const std::string& zip : {readFile(pythonArchive("stored.zip")), buildZip({{"a", "1", true}}, true)}) {
    for (size_t n = 0; n < zip.size(); ++n) {
      CAPTURE(n);
      CHECK_THROWS_AS(parseZipDirectory(zip.substr(0, n), "prefix"), WireError);
    }
  }
}

TEST_CASE("every byte of an archive changed: refused or parsed consistently, never a crash") {
  const std::string crafted = buildZip({{"a", "1", true}, {"b", "22"}}, true);
  for (const std::string& zip : {readFile(pythonArchive("deflated.zip")), crafted}) {
    for (size_t i = 0; i < zip.size(); ++i) {
      for (const unsigned char v : {0x00, 0xFF, 0x80}) {
        std::string bad = zip;
        bad[i] = static_cast<char>(v);
        CAPTURE(i, v);
        refusedOrConsistent(bad);
      }
    }
  }
}

TEST_CASE("a crafted end record is refused, naming what is wrong") {
  const std::string zip = buildZip({{std::string(60, 'a'), "1"}, {std::string(60, 'b'), "2"}}, false);
  const size_t end = zip.size() - 22, directoryAt = zip.size() - 22 - 2 * (46 + 60);
  auto with = [&](size_t at, uint64_t v, int width) {
    std::string bad = zip;
    patch(bad, at, v, width);
    return refusal(bad);
  };
  CHECK(refusal(zip) == "(parsed)");
  CHECK_THAT(with(end + 8, 3, 2), Catch::Contains("multi-disk"));  // entries on this disk, not in all
  std::string more = zip;
  patch(more, end + 8, 3, 2);
  patch(more, end + 10, 3, 2);
  CHECK_THAT(refusal(more), Catch::Contains("holds 2 entries, its end record declares 3"));
  patch(more, end + 8, 1, 2);
  patch(more, end + 10, 1, 2);
  CHECK_THAT(refusal(more), Catch::Contains("bytes past the 1 entries"));
  patch(more, end + 8, 40, 2);
  patch(more, end + 10, 40, 2);
  CHECK_THAT(refusal(more), Catch::Contains("cannot hold the 40 entries"));
  CHECK_THAT(with(end + 16, zip.size(), 4), Catch::Contains("does not end where its end record starts"));
  CHECK_THAT(with(end + 16, 0xFFFFFFFF, 4), Catch::Contains("does not end where its end record starts"));
  CHECK_THAT(with(end + 16, directoryAt - 1, 4), Catch::Contains("does not end where its end record starts"));
  CHECK_THAT(with(end + 12, 0xFFFFFFFF, 4), Catch::Contains("over the limit of 268435456"));
  CHECK_THAT(with(end + 12, 300, 4), Catch::Contains("does not end where its end record starts"));
  // Data before the archive (a self-extractor's stub): miniz 2 and 3 would read different bytes.
  CHECK_THAT(refusal("MZ stub" + zip), Catch::Contains("does not end where its end record starts"));
  CHECK_THAT(with(end + 4, 1, 2), Catch::Contains("multi-disk"));
  CHECK_THAT(with(end + 20, 5, 2), Catch::Contains("does not end the file"));
  CHECK_THAT(refusal(zip + "x"), Catch::Contains("does not end the file"));
  std::string commented = zip + "hi!";
  patch(commented, end + 20, 3, 2);
  CHECK(refusal(commented) == "(parsed)");
  // The second entry's name, running past the directory, then over the limit.
  const size_t second = directoryAt + 46 + 60;
  CHECK_THAT(with(second + 28, 100, 2), Catch::Contains("entry 1: its name, extra data and comment run past"));
  CHECK_THAT(with(second + 28, 5000, 2), Catch::Contains("over the limit of 4096"));
  CHECK_THAT(with(second, 0x12345678, 4), Catch::Contains("entry 1: no central directory header signature"));
  CHECK_THAT(with(directoryAt + 42, directoryAt - 10, 4), Catch::Contains("running past the directory"));
  CHECK_THAT(with(directoryAt + 20, 0xFFFFFFF0, 4), Catch::Contains("running past the directory"));
}

TEST_CASE("crafted zip64 records and extra fields are refused") {
  const std::string zip = buildZip({{"a", "1", true}, {"b", "22", true}}, true);
  const size_t locator = zip.size() - 22 - 20, record = locator - 56;
  auto with = [&](size_t at, uint64_t v, int width) {
    std::string bad = zip;
    patch(bad, at, v, width);
    return refusal(bad);
  };
  CHECK(refusal(zip) == "(parsed)");
  CHECK_THAT(with(record + 32, 2'000'000, 8), Catch::Contains("multi-disk"));  // entries on this disk differ
  std::string many = zip;
  patch(many, record + 24, 2'000'000, 8);
  patch(many, record + 32, 2'000'000, 8);
  CHECK_THAT(refusal(many), Catch::Contains("over the limit of 1000000"));
  CHECK_THAT(with(record + 40, uint64_t{300} << 20, 8), Catch::Contains("over the limit of 268435456"));
  CHECK_THAT(with(record + 48, uint64_t{1} << 62, 8), Catch::Contains("does not end where its end record starts"));
  CHECK_THAT(with(record + 4, 43, 8), Catch::Contains("length is 43, not 44"));
  CHECK_THAT(with(record + 4, ~uint64_t{0}, 8), Catch::Contains("not 44"));
  CHECK_THAT(with(record, 0x12345678, 4), Catch::Contains("no zip64 end record signature"));
  CHECK_THAT(with(locator + 8, record + 1, 8), Catch::Contains("not just before itself"));
  CHECK_THAT(with(locator + 8, ~uint64_t{0}, 8), Catch::Contains("not just before itself"));
  CHECK_THAT(with(locator + 8, 0, 8), Catch::Contains("not just before itself"));
  CHECK_THAT(with(locator + 16, 2, 4), Catch::Contains("multi-disk"));
  CHECK_THAT(refusal(buildZip({{"a", "1", true, 1}}, false)),
             Catch::Contains("zip64 extra field of 8 bytes, 24 needed"));
  CHECK_THAT(refusal(buildZip({{"a", "1", true, 0}}, false)), Catch::Contains("no zip64 extra field"));
  const uint64_t half = uint64_t{1} << 63;
  CHECK_THAT(refusal(buildZip({{"a", "1", true, 3, half}, {"b", "2", true, 3, half}}, true)),
             Catch::Contains("sum past 2^64"));
  const std::string biggest = buildZip({{"a", "1", true, 3, half}, {"b", "2", true, 3, half - 1}}, true);
  const ZipDirectory big = parseZipDirectory(biggest, "biggest");
  CHECK(big.uncompressedBytes == ~uint64_t{0});
}

TEST_CASE("errors name the file and show an entry's name escaped and cut, never raw bytes") {
  const std::string name = "evil\n\x1b[31m" + std::string(300, 'n');
  std::string zip = buildZip({{name, "1"}}, false);
  patch(zip, zip.size() - 22 - (46 + name.size()) + 42, 1 << 20, 4);  // its local header far past the directory
  const std::string message = refusal(zip);
  CHECK_THAT(message, Catch::StartsWith("ZIP archive crafted.zip: entry 0 (\"evil\\x0a\\x1b[31mnnn"));
  CHECK_THAT(message, Catch::Contains("n...\")"));
  CHECK(message.find('\n') == std::string::npos);
  CHECK(message.find('\x1b') == std::string::npos);
  CHECK(message.size() < 400);
  CHECK_THROWS_WITH(readZipDirectory(scratch("missing.zip").string()), Catch::Contains("missing.zip: cannot open"));
  CHECK_THROWS_WITH(readZipDirectory(scratch("").string()), Catch::Contains("is not a regular file"));
}
