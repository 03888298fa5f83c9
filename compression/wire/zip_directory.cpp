#include "compression/wire/zip_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <utility>

#include "scheduler/error.h"

namespace skytrain::compression {
namespace {

// The records read, from PKWARE's APPNOTE.TXT (4.3.12 to 4.3.16, 4.5.3); all little-endian.
//
// End record, 22 bytes + comment: signature u32 | this disk u16 @4 | directory's disk u16 @6 |
//   entries on this disk u16 @8 | entries u16 @10 | directory bytes u32 @12 |
//   directory offset u32 @16 | comment length u16 @20
// Zip64 locator, 20 bytes, just before the end record: signature u32 | record's disk u32 @4 |
//   record offset u64 @8 | disks u32 @16
// Zip64 end record, 56 bytes + extensible data: signature u32 | bytes after this field u64 @4 |
//   versions u16 u16 @12 | this disk u32 @16 | directory's disk u32 @20 |
//   entries on this disk u64 @24 | entries u64 @32 | directory bytes u64 @40 | directory offset u64 @48
// Directory entry, 46 bytes + name + extra + comment: signature u32 | method u16 @10 |
//   compressed u32 @20 | uncompressed u32 @24 | name length u16 @28 | extra length u16 @30 |
//   comment length u16 @32 | start disk u16 @34 | local header offset u32 @42
// Extra: (id u16 | size u16 | data)*; id 1 (zip64) holds u64 uncompressed, compressed, local
//   header offset, each only where the entry's own field is 0xFFFFFFFF, in that order.
constexpr char kEndSignature[] = "PK\x05\x06";
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kEntrySignature = 0x02014b50;
constexpr uint64_t kEndBytes = 22, kMaxCommentBytes = 0xFFFF;
constexpr uint64_t kZip64LocatorBytes = 20, kZip64EndBytes = 56;
constexpr uint64_t kEntryBytes = 46, kLocalHeaderBytes = 30;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint64_t kInZip64Extra = 0xFFFFFFFF;

uint64_t le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t le16(const char* p) { return le(p, 2); }
uint64_t le32(const char* p) { return le(p, 4); }
uint64_t le64(const char* p) { return le(p, 8); }

std::string str(uint64_t v) { return std::to_string(v); }

// An entry's name as an error may show it: 128 bytes at most, printable ASCII only.
std::string shown(const std::string& name) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < name.size() && i < 128; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out += static_cast<char>(c);
    } else {
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return name.size() > 128 ? out + "..." : out;
}

// The archive as the one parser sees it, a file or bytes in memory: its size and a reader of
// exactly `length` bytes at `offset`, which throws WireError when it cannot.
class Archive {
 public:
  using ReadAt = std::function<void(uint64_t offset, size_t length, char* dst)>;
  Archive(uint64_t size, ReadAt readAt, const std::string& source)
      : size_(size), readAt_(std::move(readAt)), source_(source) {}

  uint64_t size() const { return size_; }

  [[noreturn]] void bad(const std::string& problem) const {
    throw WireError("ZIP archive " + source_ + ": " + problem);
  }

  // Refused, not read, unless every byte lies inside the file.
  std::string read(uint64_t offset, uint64_t length, const std::string& what) const {
    if (offset > size_ || length > size_ - offset) {
      bad(what + " (" + str(length) + " bytes at offset " + str(offset) + ") runs past the end of the file (" +
          str(size_) + " bytes)");
    }
    std::string out(length, '\0');
    readAt_(offset, length, out.data());
    return out;
  }

 private:
  uint64_t size_;
  ReadAt readAt_;
  const std::string& source_;
};

// What an end record (or the zip64 one that replaces it) declares.
struct EndRecord {
  uint64_t thisDisk = 0, directoryDisk = 0, entriesHere = 0, entries = 0;
  uint64_t directoryBytes = 0, directoryOffset = 0;
  uint64_t at = 0;  // where the record starts: the directory must end at or before it
};

EndRecord readZip64End(const Archive& a, const char* locator, uint64_t locatorAt) {
  if (le32(locator + 4) != 0 || le32(locator + 16) != 1) {
    a.bad("its zip64 locator names disk " + str(le32(locator + 4)) + " of " + str(le32(locator + 16)) +
          ": multi-disk archives are not read");
  }
  // miniz 3 takes the record just before the locator if it finds one there, else the one the
  // locator points at: the two must be the same, a record with no extensible data.
  if (locatorAt < kZip64EndBytes || le64(locator + 8) != locatorAt - kZip64EndBytes) {
    a.bad("its zip64 locator points at offset " + str(le64(locator + 8)) + ", not just before itself");
  }
  const uint64_t at = locatorAt - kZip64EndBytes;
  const std::string record = a.read(at, kZip64EndBytes, "its zip64 end record");
  const char* r = record.data();
  if (le32(r) != kZip64EndSignature) a.bad("no zip64 end record signature at offset " + str(at));
  if (le64(r + 4) != kZip64EndBytes - 12) {
    a.bad("its zip64 end record's length is " + str(le64(r + 4)) + ", not 44 (extensible data is not read)");
  }
  return {le32(r + 16), le32(r + 20), le64(r + 24), le64(r + 32), le64(r + 40), le64(r + 48), at};
}

// The end record is the last signature in the file's last 65,557 bytes, where miniz looks,
// and its comment must end the file. A zip64 locator just before it replaces it by the zip64
// record, whatever the end record's own fields say, as in miniz. The records this returns
// are those miniz 2 and 3 both read, or none.
EndRecord readEnd(const Archive& a) {
  if (a.size() < kEndBytes) a.bad("is " + str(a.size()) + " bytes, too short to be a ZIP archive");
  const uint64_t tailBytes = std::min(a.size(), kEndBytes + kMaxCommentBytes);
  const std::string tail = a.read(a.size() - tailBytes, tailBytes, "its tail");
  const size_t found = tail.rfind(std::string(kEndSignature, 4), tailBytes - kEndBytes);
  if (found == std::string::npos) {
    a.bad("has no end-of-central-directory record in its last " + str(tailBytes) + " bytes: not a ZIP archive");
  }
  const char* p = tail.data() + found;
  if (found + kEndBytes + le16(p + 20) != tailBytes) {
    a.bad("its end record's comment (" + str(le16(p + 20)) + " bytes) does not end the file");
  }
  const uint64_t at = a.size() - tailBytes + found;
  if (at >= kZip64LocatorBytes) {
    const std::string locator = a.read(at - kZip64LocatorBytes, kZip64LocatorBytes, "its zip64 locator");
    if (le32(locator.data()) == kZip64LocatorSignature) return readZip64End(a, locator.data(), at - kZip64LocatorBytes);
  }
  return {le16(p + 4), le16(p + 6), le16(p + 8), le16(p + 10), le32(p + 12), le32(p + 16), at};
}

EndRecord locateDirectory(const Archive& a) {
  const EndRecord e = readEnd(a);
  if (e.thisDisk != 0 || e.directoryDisk != 0 || e.entriesHere != e.entries) {
    a.bad("its end record names disk " + str(e.thisDisk) + " and " + str(e.entriesHere) + " of " + str(e.entries) +
          " entries on it: multi-disk archives are not read");
  }
  if (e.entries > kMaxZipEntries) {
    a.bad("declares " + str(e.entries) + " entries, over the limit of " + str(kMaxZipEntries));
  }
  if (e.directoryBytes > kMaxZipDirectoryBytes) {
    a.bad("declares a directory of " + str(e.directoryBytes) + " bytes, over the limit of " +
          str(kMaxZipDirectoryBytes));
  }
  if (e.directoryBytes < e.entries * kEntryBytes) {  // no overflow: entries <= kMaxZipEntries
    a.bad("its directory of " + str(e.directoryBytes) + " bytes cannot hold the " + str(e.entries) +
          " entries it declares");
  }
  // No gap either: miniz 3 reads one as data prepended to the archive, and shifts by it.
  if (e.directoryOffset > e.at || e.directoryBytes != e.at - e.directoryOffset) {
    a.bad("its directory (" + str(e.directoryBytes) + " bytes at offset " + str(e.directoryOffset) +
          ") does not end where its end record starts, at offset " + str(e.at));
  }
  return e;
}

// Replaces each of `fields` that is 0xFFFFFFFF by the next u64 of the zip64 extra field.
template <typename Bad>
void readZip64Extra(const char* extra, uint64_t bytes, std::initializer_list<uint64_t*> fields, const Bad& bad) {
  uint64_t deferred = 0;
  for (const uint64_t* f : fields) deferred += *f == kInZip64Extra;
  if (deferred == 0) return;
  for (uint64_t at = 0;;) {
    if (bytes - at < 4) bad("a size or offset of 0xFFFFFFFF, but no zip64 extra field");
    const uint64_t id = le16(extra + at), size = le16(extra + at + 2);
    if (size > bytes - at - 4) bad("an extra field of " + str(size) + " bytes running past the entry's extra data");
    if (id == kZip64ExtraId) {
      if (size < 8 * deferred) bad("a zip64 extra field of " + str(size) + " bytes, " + str(8 * deferred) + " needed");
      const char* value = extra + at + 4;
      for (uint64_t* f : fields) {
        if (*f != kInZip64Extra) continue;
        *f = le64(value);
        value += 8;
      }
      return;
    }
    at += 4 + size;
  }
}

// Reads the entry at `p`, with `left` bytes of the directory from there on; returns its
// length. Its local header and data must lie before the directory, at `dataEnd`.
uint64_t readEntry(const Archive& a, const char* p, uint64_t left, uint64_t index, uint64_t dataEnd, ZipEntry& e) {
  const std::string which = "entry " + str(index);
  if (left < kEntryBytes) a.bad(which + ": its 46-byte header runs past the directory's end");
  if (le32(p) != kEntrySignature) a.bad(which + ": no central directory header signature");
  const uint64_t nameBytes = le16(p + 28), extraBytes = le16(p + 30), commentBytes = le16(p + 32);
  if (nameBytes > kMaxZipNameBytes) {
    a.bad(which + ": its name of " + str(nameBytes) + " bytes is over the limit of " + str(kMaxZipNameBytes));
  }
  const uint64_t length = kEntryBytes + nameBytes + extraBytes + commentBytes;
  if (length > left) a.bad(which + ": its name, extra data and comment run past the directory's end");
  e.name.assign(p + kEntryBytes, nameBytes);
  const auto bad = [&](const std::string& problem) { a.bad(which + " (\"" + shown(e.name) + "\") has " + problem); };
  if (le16(p + 34) != 0) bad("its data on disk " + str(le16(p + 34)) + ": multi-disk archives are not read");
  e.method = static_cast<uint16_t>(le16(p + 10));
  e.compressedBytes = le32(p + 20);
  e.uncompressedBytes = le32(p + 24);
  uint64_t localHeader = le32(p + 42);
  readZip64Extra(p + kEntryBytes + nameBytes, extraBytes, {&e.uncompressedBytes, &e.compressedBytes, &localHeader},
                 bad);
  if (localHeader > dataEnd || dataEnd - localHeader < kLocalHeaderBytes ||
      e.compressedBytes > dataEnd - localHeader - kLocalHeaderBytes) {
    bad("its data (" + str(e.compressedBytes) + " bytes after a local header at offset " + str(localHeader) +
        ") running past the directory at offset " + str(dataEnd));
  }
  return length;
}

ZipDirectory parse(const Archive& a) {
  const EndRecord end = locateDirectory(a);
  const std::string directory = a.read(end.directoryOffset, end.directoryBytes, "its central directory");
  ZipDirectory out;
  out.entries.reserve(end.entries);  // at most directoryBytes / 46, checked
  for (uint64_t at = 0; at < directory.size();) {
    if (out.entries.size() == end.entries) {
      a.bad("its directory has " + str(directory.size() - at) + " bytes past the " + str(end.entries) +
            " entries its end record declares");
    }
    ZipEntry e;
    at += readEntry(a, directory.data() + at, directory.size() - at, out.entries.size(), end.directoryOffset, e);
    if (e.uncompressedBytes > std::numeric_limits<uint64_t>::max() - out.uncompressedBytes) {
      a.bad("its entries' uncompressed sizes sum past 2^64 bytes");
    }
    out.uncompressedBytes += e.uncompressedBytes;
    out.entries.push_back(std::move(e));
  }
  if (out.entries.size() != end.entries) {
    a.bad("its directory holds " + str(out.entries.size()) + " entries, its end record declares " + str(end.entries));
  }
  return out;
}

}  // namespace

ZipDirectory readZipDirectory(const std::string& path) {
  const auto bad = [&](const std::string& problem) { throw WireError("ZIP archive " + path + ": " + problem); };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad(std::string("cannot open: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) bad(std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) bad("is not a regular file");
  const auto readAt = [&](uint64_t offset, size_t length, char* dst) {
    while (length > 0) {
      const ssize_t n = ::pread(fd, dst, length, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) bad(std::string("cannot read: ") + std::strerror(errno));
      if (n == 0) bad("shrank while being read");
      dst += n;
      offset += static_cast<uint64_t>(n);
      length -= static_cast<size_t>(n);
    }
  };
  return parse(Archive(static_cast<uint64_t>(st.st_size), readAt, path));
}

ZipDirectory parseZipDirectory(const std::string& archive, const std::string& source) {
  const auto readAt = [&](uint64_t offset, size_t length, char* dst) {
    std::memcpy(dst, archive.data() + offset, length);
  };
  return parse(Archive(archive.size(), readAt, source));
}

}  // namespace skytrain::compression
