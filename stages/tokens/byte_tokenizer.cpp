#include "scheduler/error.h"
#include "stages/tokens/tokenizer.h"

namespace skytrain::stages {
namespace {

class ByteTokenizer : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int vocabSize() const override { return 256; }

  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text(ids.size(), '\0');
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] > 255) throw Error("byte tokenizer: id " + std::to_string(ids[i]) + " is not a byte");
      text[i] = static_cast<char>(ids[i]);
    }
    return text;
  }
};

}  // namespace

std::unique_ptr<Tokenizer> makeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace skytrain::stages
