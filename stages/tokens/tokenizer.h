// Tokenizers: text to token ids. A byte-level one is built in; SentencePiece models load
// through libsentencepiece.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace skytrain::stages {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int vocabSize() const = 0;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
};

// Each byte is one token (vocabulary 256); lossless for any input.
std::unique_ptr<Tokenizer> makeByteTokenizer();

// Loads a SentencePiece model file; throws skytrain::Error naming the path on failure.
std::unique_ptr<Tokenizer> makeSentencePieceTokenizer(const std::string& modelPath);

}  // namespace skytrain::stages
