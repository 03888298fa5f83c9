// Pre-tokenised corpora on disk: nanoGPT's flat token arrays (train.bin: uint16 or uint32,
// nothing else in the file) and Megatron's indexed datasets (a .bin of tokens and a .idx of
// document boundaries). Read memory-mapped; written shard by shard. Torch-free, so the CLI's
// `skytrain data prepare` writes exactly what the stages read.
//
// The .idx layout (little-endian), as Megatron-LM's indexed_dataset writes it:
//   "MMIDIDX\0\0" | u64 version = 1 | u8 dtype code | u64 sequences S | u64 documents D |
//   i32 lengths[S] | i64 byte pointers[S] | i64 document starts[D] (0, ..., S) | [i8 modes[S]]
// Dtype codes: 1 uint8, 3 int16, 4 int32, 5 int64, 8 uint16 (the integer ones).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace skytrain::stages {

enum class TokenDtype : uint8_t { U8, I16, U16, I32, U32, I64 };

// "uint16" -> U16 ...; throws skytrain::Error listing the valid names.
TokenDtype tokenDtype(const std::string& name);
std::string dtypeName(TokenDtype dtype);
size_t itemSize(TokenDtype dtype);

// A token file, opened read-only and memory-mapped. Trusts nothing in it: an index must
// describe its .bin exactly (contiguous sequences inside the file, documents in order), a
// flat file must be a whole number of tokens; a violation throws skytrain::WireError naming
// the file and the byte offset. Values are checked where read (tokenAt's caller bounds them
// by the vocabulary).
class TokenFile {
 public:
  // `path` ending in ".bin" with a sibling ".idx": an indexed dataset, its dtype from the
  // index. Otherwise a flat array of `flatDtype`.
  TokenFile(const std::string& path, TokenDtype flatDtype);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  bool indexed() const { return indexed_; }
  TokenDtype dtype() const { return dtype_; }
  uint64_t tokens() const { return tokens_; }
  uint64_t documents() const { return documents_; }  // 1 for a flat file
  uint64_t indexBytes() const { return indexBytes_; }
  int64_t tokenAt(uint64_t i) const;  // the raw value (signed dtypes may hold negatives)
  uint64_t byteOffset(uint64_t i) const { return i * itemSize(dtype_); }

 private:
  void readIndex(const std::string& indexPath, uint64_t binBytes);

  std::string path_;
  bool indexed_ = false;
  TokenDtype dtype_ = TokenDtype::U16;
  uint64_t tokens_ = 0;
  uint64_t documents_ = 1;
  uint64_t indexBytes_ = 0;
  const unsigned char* data_ = nullptr;  // the mapped .bin
  uint64_t mappedBytes_ = 0;
};

// Writes one shard: documents appended in order, the .bin streamed to disk, and (indexed)
// the .idx at finish(). Files are written under a temporary name and renamed at finish(), so
// a shard exists whole or not at all. Throws skytrain::Error naming the file.
class TokenShardWriter {
 public:
  TokenShardWriter(std::string binPath, TokenDtype dtype, bool indexed);
  ~TokenShardWriter();  // an unfinished shard's temporary files are removed

  // Throws when a token does not fit the dtype.
  void append(const std::vector<int32_t>& document);
  void finish();
  uint64_t tokens() const { return tokens_; }
  uint64_t documents() const { return lengths_.size(); }

 private:
  std::string binPath_;
  TokenDtype dtype_;
  bool indexed_;
  int fd_ = -1;
  uint64_t tokens_ = 0;
  std::vector<int32_t> lengths_;
  bool finished_ = false;
};

}  // namespace skytrain::stages

