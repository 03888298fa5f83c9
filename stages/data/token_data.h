// TokenDataSource: pre-tokenised corpora (stages/tokens/token_files.h), memory-mapped, any number of
// shards per source, several sources blended by weight. Opening one costs the same whatever
// the corpus's size (the files are mapped, indexes checked and let go); a batch reads only
// its own windows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stages/data/text_data.h"
#include "stages/tokens/token_files.h"

namespace skytrain::stages {

struct TokenSourceOptions {
  std::vector<std::string> files;  // the source's shards, in order
  double weight = 1.0;             // its share of the samples, relative to the others'
};

struct TokenDataOptions {
  std::vector<TokenSourceOptions> sources;
  std::vector<std::string> evalFiles;  // validation from these; else each source's held-out tail
  TokenDtype flatDtype = TokenDtype::U16;  // of files without an index
  std::string sentencepieceModel;  // decodes the ids; empty: byte ids when vocab is 256, else bare ids
  double validationFraction = 0.05;
  int seqLen = 64;
  int vocabSize = 256;  // a token at or above it is refused, naming the file and offset
  uint64_t seed = 0;
};

class TokenDataSource : public DataSource {
 public:
  // Opens every file; throws skytrain::Error (WireError for a malformed file) naming it.
  explicit TokenDataSource(TokenDataOptions options);
  ~TokenDataSource() override;

  // Sample j of step s: a source drawn by weight, then a window of seq_len + 1 tokens inside
  // one shard, both from (seed, s, j) alone. Throws skytrain::Error naming the file and byte
  // offset of a token outside the vocabulary.
  TokenBatch trainBatch(uint64_t step, int firstSample, int count) const override;
  TokenBatch validationBatch(int firstSample, int count) const override;
  const Tokenizer& tokenizer() const override { return *tokenizer_; }

  uint64_t trainTokens() const;
  uint64_t validationTokens() const;
  uint64_t documents() const;
  // Identifies the corpus (each file's path, size and tokens): a checkpoint records it, and
  // resuming on another corpus is refused rather than continued on different data.
  std::string fingerprint() const override;

  struct Segment;  // a run of one file's tokens that windows may start in
  struct Region;   // a source's train or validation segments

 private:
  TokenBatch gather(const std::vector<Region>& regions, uint64_t stream, int firstSample, int count) const;

  TokenDataOptions options_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::unique_ptr<TokenFile>> files_;
  std::vector<Region> train_;       // one per source
  std::vector<Region> validation_;  // one per source, or one of the eval files
  std::vector<double> cumulativeWeight_;
};

}  // namespace skytrain::stages
