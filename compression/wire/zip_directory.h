// The central directory of a ZIP archive, read without Torch and without touching the
// members' data: how the daemon bounds what loading a TorchScript module (a .pt file is a
// ZIP archive written by PyTorch's miniz) will allocate, before loading it.
//
// Why the directory is a bound: miniz, which LibTorch reads .pt files with, allocates each
// record it extracts by the central directory's uncompressed size, and refuses a member whose
// data does not inflate to exactly that size. So the directory's sum bounds what loading
// allocates for the records' data, each counted once -- a zip bomb (3 MB of deflate that
// inflates to 3 GiB) is counted at 3 GiB. The directory itself, which miniz also holds, is
// at most kMaxZipDirectoryBytes and is not in the sum.
//
// Trusts nothing, and reads only what miniz would read the same way: the end record is the
// last signature in the file's last 65,557 bytes (the one miniz takes), with its comment
// ending the file; a zip64 locator just before it is used, as miniz uses it; the directory,
// the zip64 record and its locator, and the end record follow each other with no gap (miniz 3
// would take a gap for data before the archive and shift every offset by it); every offset
// and length is checked against the file with overflow-safe arithmetic; the declared entry
// count must be exactly what the directory holds, and the directory must hold nothing else.
// Errors never quote the file but for an entry's name, cut to 128 bytes with every byte
// outside printable ASCII escaped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace skytrain::compression {

// Limits on what a directory may declare, checked before anything is allocated by it.
constexpr uint64_t kMaxZipEntries = 1'000'000;
constexpr uint64_t kMaxZipDirectoryBytes = uint64_t{256} << 20;
constexpr uint64_t kMaxZipNameBytes = 4096;

struct ZipEntry {
  std::string name;
  uint64_t compressedBytes = 0, uncompressedBytes = 0;
  uint16_t method = 0;  // 0 stored, 8 deflated; any other is reported, not refused
};

struct ZipDirectory {
  std::vector<ZipEntry> entries;  // in directory order
  uint64_t uncompressedBytes = 0;  // the entries' sum; an archive whose sum would pass 2^64 is refused
};

// Reads only the end-of-central-directory record (and the zip64 locator and record when
// present) and the central directory of the file at `path`; never the members' data.
// Throws skytrain::WireError naming the path and the problem when the file cannot be read,
// is not a ZIP archive, or its directory is malformed or over the limits above.
ZipDirectory readZipDirectory(const std::string& path);

// The same on the bytes of a whole archive in memory (for tests and the fuzzer); `source`
// names it in errors.
ZipDirectory parseZipDirectory(const std::string& archive, const std::string& source);

}  // namespace skytrain::compression
