#include "stages/tokens/token_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "scheduler/error.h"

namespace skytrain::stages {
namespace {

constexpr char kIndexMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kIndexHeaderBytes = 9 + 8 + 1 + 8 + 8;

struct DtypeRow {
  TokenDtype dtype;
  const char* name;
  size_t size;
  int megatronCode;  // 0: none
};

constexpr DtypeRow kDtypes[] = {
    {TokenDtype::U8, "uint8", 1, 1},   {TokenDtype::I16, "int16", 2, 3}, {TokenDtype::U16, "uint16", 2, 8},
    {TokenDtype::I32, "int32", 4, 4},  {TokenDtype::U32, "uint32", 4, 0}, {TokenDtype::I64, "int64", 8, 5},
};

const DtypeRow& row(TokenDtype dtype) {
  for (const auto& r : kDtypes) {
    if (r.dtype == dtype) return r;
  }
  throw InternalError("unknown token dtype");
}

std::string errnoText() { return std::strerror(errno); }

template <typename T>
T load(const unsigned char* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

// A whole file mapped read-only; unmapped on destruction.
struct Mapping {
  const unsigned char* data = nullptr;
  uint64_t size = 0;

  Mapping(const std::string& path, const char* what) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(std::string(what) + " \"" + path + "\" cannot be opened: " + errnoText());
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(std::string(what) + " \"" + path + "\" is not a regular file");
    }
    size = static_cast<uint64_t>(st.st_size);
    if (size > 0) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw Error(std::string(what) + " \"" + path + "\" cannot be mapped: " + errnoText());
      }
      data = static_cast<const unsigned char*>(p);
    }
    ::close(fd);
  }
  ~Mapping() { release(); }
  void release() {
    if (data) ::munmap(const_cast<unsigned char*>(data), size);
    data = nullptr;
  }
};

// An index is read once, in order: the pages behind the scan are dropped as it goes, so a
// 10-million-document index costs a few megabytes of resident memory, not its size.
constexpr uint64_t kReleaseEvery = 1 << 20;  // entries

void release(const unsigned char* from, const unsigned char* to) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(from) + page - 1) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(to) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

std::string at(const std::string& path, uint64_t offset) {
  return "\"" + path + "\" at byte " + std::to_string(offset);
}

void writeAll(int fd, const void* bytes, size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(bytes);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("\"" + path + "\": write failed: " + errnoText());
    p += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

TokenDtype tokenDtype(const std::string& name) {
  std::string valid;
  for (const auto& r : kDtypes) {
    if (name == r.name) return r.dtype;
    valid += (valid.empty() ? "" : ", ") + std::string(r.name);
  }
  throw Error("unknown token dtype \"" + name + "\" (valid: " + valid + ")");
}

std::string dtypeName(TokenDtype dtype) { return row(dtype).name; }
size_t itemSize(TokenDtype dtype) { return row(dtype).size; }

TokenFile::TokenFile(const std::string& path, TokenDtype flatDtype) : path_(path), dtype_(flatDtype) {
  const std::filesystem::path p(path);
  std::string indexPath;
  if (p.extension() == ".bin") {
    indexPath = std::filesystem::path(p).replace_extension(".idx").string();
    std::error_code ec;
    indexed_ = std::filesystem::exists(indexPath, ec);
  }
  Mapping bin(path, "token file");
  if (indexed_) {
    readIndex(indexPath, bin.size);
  } else {
    if (bin.size % itemSize(dtype_) != 0) {
      throw WireError("token file " + at(path, bin.size - bin.size % itemSize(dtype_)) + ": its size (" +
                      std::to_string(bin.size) + " bytes) is not a whole number of " + dtypeName(dtype_) +
                      " tokens: truncated, or another dtype");
    }
    tokens_ = bin.size / itemSize(dtype_);
  }
  if (tokens_ == 0) throw Error("token file \"" + path + "\" holds no tokens");
  // Sampling reads a few windows anywhere: no read-ahead.
  ::madvise(const_cast<unsigned char*>(bin.data), bin.size, MADV_RANDOM);
  data_ = bin.data;
  mappedBytes_ = bin.size;
  bin.data = nullptr;  // kept mapped for the file's lifetime
}

TokenFile::~TokenFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), mappedBytes_);
}

// Checks the whole index against the .bin once, in one pass, keeps only its counts, and unmaps it: the
// windows sampled from the .bin may cross documents (as Megatron's GPT dataset's do), so
// nothing later needs the index, and its pages do not stay resident.
void TokenFile::readIndex(const std::string& indexPath, uint64_t binBytes) {
  Mapping idx(indexPath, "token index");
  indexBytes_ = idx.size;
  const unsigned char* p = idx.data;
  if (idx.size < kIndexHeaderBytes || std::memcmp(p, kIndexMagic, sizeof kIndexMagic) != 0) {
    throw WireError("token index " + at(indexPath, 0) + ": not a Megatron indexed dataset index (no MMIDIDX header)");
  }
  if (const auto version = load<uint64_t>(p + 9); version != 1) {
    throw WireError("token index " + at(indexPath, 9) + ": version " + std::to_string(version) + " (only 1 is known)");
  }
  const int code = p[17];
  bool known = false;
  for (const auto& r : kDtypes) {
    if (r.megatronCode != 0 && r.megatronCode == code) dtype_ = r.dtype, known = true;
  }
  if (!known) {
    throw WireError("token index " + at(indexPath, 17) + ": dtype code " + std::to_string(code) +
                    " is not an integer token type (valid: 1 uint8, 3 int16, 4 int32, 5 int64, 8 uint16)");
  }
  const uint64_t sequences = load<uint64_t>(p + 18);
  const uint64_t documents = load<uint64_t>(p + 26);
  const uint64_t room = idx.size - kIndexHeaderBytes;
  // Bounded before any arithmetic can overflow: 12 bytes a sequence, 8 a document.
  if (sequences > room / 12 || documents > room / 8 || sequences * 12 + documents * 8 > room) {
    throw WireError("token index " + at(indexPath, 18) + ": " + std::to_string(sequences) + " sequences and " +
                    std::to_string(documents) + " documents do not fit its " + std::to_string(idx.size) + " bytes");
  }
  const uint64_t expected = sequences * 12 + documents * 8;
  if (room != expected && room != expected + sequences) {  // optionally one mode byte a sequence
    throw WireError("token index " + at(indexPath, kIndexHeaderBytes + expected) + ": " +
                    std::to_string(room - expected) + " bytes past its arrays");
  }
  const unsigned char* lengths = p + kIndexHeaderBytes;
  const unsigned char* pointers = lengths + sequences * 4;
  const unsigned char* starts = pointers + sequences * 8;
  const uint64_t item = itemSize(dtype_);
  uint64_t next = 0;  // bytes of the .bin the sequences so far cover
  for (uint64_t i = 0; i < sequences; ++i) {
    if (i % kReleaseEvery == 0 && i > 0) {
      release(lengths + (i - kReleaseEvery) * 4, lengths + i * 4);
      release(pointers + (i - kReleaseEvery) * 8, pointers + i * 8);
    }
    const int32_t length = load<int32_t>(lengths + i * 4);
    const int64_t pointer = load<int64_t>(pointers + i * 8);
    if (length < 0) {
      throw WireError("token index " + at(indexPath, (lengths - p) + i * 4) + ": sequence " + std::to_string(i) +
                      " has length " + std::to_string(length));
    }
    if (pointer < 0 || static_cast<uint64_t>(pointer) != next) {
      throw WireError("token index " + at(indexPath, (pointers - p) + i * 8) + ": sequence " + std::to_string(i) +
                      " starts at byte " + std::to_string(pointer) + " of the .bin, not at " + std::to_string(next) +
                      " where the one before ends");
    }
    next += static_cast<uint64_t>(length) * item;
    if (next > binBytes) {
      throw WireError("token index " + at(indexPath, (lengths - p) + i * 4) + ": sequence " + std::to_string(i) +
                      " ends at byte " + std::to_string(next) + ", past the end of \"" + path_ + "\" (" +
                      std::to_string(binBytes) + " bytes)");
    }
  }
  if (next != binBytes) {
    throw WireError("token file " + at(path_, next) + ": " + std::to_string(binBytes - next) +
                    " bytes that its index does not describe");
  }
  int64_t previous = -1;
  release(lengths, pointers);
  release(pointers, starts);
  for (uint64_t d = 0; d < documents; ++d) {
    if (d % kReleaseEvery == 0 && d > 0) release(starts + (d - kReleaseEvery) * 8, starts + d * 8);
    const int64_t start = load<int64_t>(starts + d * 8);
    const bool ok = d == 0 ? start == 0 : start >= previous && static_cast<uint64_t>(start) <= sequences;
    if (!ok) {
      throw WireError("token index " + at(indexPath, (starts - p) + d * 8) + ": document boundary " +
                      std::to_string(d) + " is " + std::to_string(start) + " (boundaries run from 0 to " +
                      std::to_string(sequences) + " in order)");
    }
    previous = start;
  }
  if (documents == 0 || static_cast<uint64_t>(previous) != sequences) {
    throw WireError("token index " + at(indexPath, (starts - p) + (documents ? documents - 1 : 0) * 8) +
                    ": the document boundaries do not end at " + std::to_string(sequences) + " sequences");
  }
  tokens_ = binBytes / item;
  documents_ = documents - 1;
}

int64_t TokenFile::tokenAt(uint64_t i) const {
  SKYTRAIN_CHECK(i < tokens_, "token " << i << " of " << tokens_);
  const unsigned char* p = data_ + i * itemSize(dtype_);
  switch (dtype_) {
    case TokenDtype::U8: return *p;
    case TokenDtype::I16: return load<int16_t>(p);
    case TokenDtype::U16: return load<uint16_t>(p);
    case TokenDtype::I32: return load<int32_t>(p);
    case TokenDtype::U32: return load<uint32_t>(p);
    case TokenDtype::I64: return load<int64_t>(p);
  }
  return 0;
}

TokenShardWriter::TokenShardWriter(std::string binPath, TokenDtype dtype, bool indexed)
    : binPath_(std::move(binPath)), dtype_(dtype), indexed_(indexed) {
  if (indexed_ && row(dtype_).megatronCode == 0) {
    throw Error("an indexed dataset cannot hold " + dtypeName(dtype_) + " tokens (Megatron has no such dtype)");
  }
  const std::string tmp = binPath_ + ".tmp";
  fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("\"" + tmp + "\" cannot be created: " + errnoText());
}

TokenShardWriter::~TokenShardWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) {
    std::error_code ec;
    std::filesystem::remove(binPath_ + ".tmp", ec);
    std::filesystem::remove(std::filesystem::path(binPath_).replace_extension(".idx").string() + ".tmp", ec);
  }
}

void TokenShardWriter::append(const std::vector<int32_t>& document) {
  SKYTRAIN_CHECK(!finished_, "append after finish");
  const size_t item = itemSize(dtype_);
  const int64_t limit = dtype_ == TokenDtype::U8 ? 255 : dtype_ == TokenDtype::I16 ? 32767
                        : dtype_ == TokenDtype::U16 ? 65535 : std::numeric_limits<int32_t>::max();
  std::vector<unsigned char> bytes(document.size() * item);
  for (size_t i = 0; i < document.size(); ++i) {
    const int64_t v = document[i];
    if (v < 0 || v > limit) throw Error("token id " + std::to_string(v) + " does not fit " + dtypeName(dtype_));
    switch (dtype_) {
      case TokenDtype::U8: bytes[i] = static_cast<unsigned char>(v); break;
      case TokenDtype::I16: { const auto x = static_cast<int16_t>(v); std::memcpy(&bytes[i * 2], &x, 2); break; }
      case TokenDtype::U16: { const auto x = static_cast<uint16_t>(v); std::memcpy(&bytes[i * 2], &x, 2); break; }
      case TokenDtype::I32: { const auto x = static_cast<int32_t>(v); std::memcpy(&bytes[i * 4], &x, 4); break; }
      case TokenDtype::U32: { const auto x = static_cast<uint32_t>(v); std::memcpy(&bytes[i * 4], &x, 4); break; }
      case TokenDtype::I64: std::memcpy(&bytes[i * 8], &v, 8); break;
    }
  }
  writeAll(fd_, bytes.data(), bytes.size(), binPath_ + ".tmp");
  if (document.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw Error("a document of " + std::to_string(document.size()) + " tokens is longer than an index can hold");
  }
  lengths_.push_back(static_cast<int32_t>(document.size()));
  tokens_ += document.size();
}

void TokenShardWriter::finish() {
  SKYTRAIN_CHECK(!finished_, "finish twice");
  if (::fsync(fd_) != 0) throw Error("\"" + binPath_ + ".tmp\": fsync failed: " + errnoText());
  ::close(fd_);
  fd_ = -1;
  const std::string indexPath = std::filesystem::path(binPath_).replace_extension(".idx").string();
  if (indexed_) {
    std::string index(kIndexMagic, sizeof kIndexMagic);
    auto put = [&index](const auto& value) { index.append(reinterpret_cast<const char*>(&value), sizeof value); };
    put(uint64_t{1});
    put(static_cast<uint8_t>(row(dtype_).megatronCode));
    put(static_cast<uint64_t>(lengths_.size()));
    put(static_cast<uint64_t>(lengths_.size() + 1));  // document starts: one sequence a document
    for (const int32_t length : lengths_) put(length);
    int64_t pointer = 0;
    for (const int32_t length : lengths_) {
      put(pointer);
      pointer += static_cast<int64_t>(length) * static_cast<int64_t>(itemSize(dtype_));
    }
    for (size_t d = 0; d <= lengths_.size(); ++d) put(static_cast<int64_t>(d));
    const std::string tmp = indexPath + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("\"" + tmp + "\" cannot be created: " + errnoText());
    writeAll(fd, index.data(), index.size(), tmp);
    ::fsync(fd);
    ::close(fd);
    std::filesystem::rename(tmp, indexPath);
  }
  std::filesystem::rename(binPath_ + ".tmp", binPath_);
  finished_ = true;
}

}  // namespace skytrain::stages
