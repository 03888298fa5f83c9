#include <sentencepiece_processor.h>

#include "scheduler/error.h"
#include "stages/tokenizer.h"

namespace skytrain::stages {
namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& modelPath) : path_(modelPath) {
    const auto status = processor_.Load(modelPath);
    if (!status.ok()) {
      throw Error("sentencepiece model \"" + modelPath + "\" could not be loaded: " + status.ToString());
    }
  }

  std::string name() const override { return "sentencepiece:" + path_; }
  int vocabSize() const override { return processor_.GetPieceSize(); }

  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int> ids;
    const auto status = processor_.Encode(text, &ids);
    if (!status.ok()) throw Error("sentencepiece encode failed: " + status.ToString());
    return {ids.begin(), ids.end()};
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    const auto status = processor_.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    if (!status.ok()) throw Error("sentencepiece decode failed: " + status.ToString());
    return text;
  }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

std::unique_ptr<Tokenizer> makeSentencePieceTokenizer(const std::string& modelPath) {
  return std::make_unique<SentencePieceTokenizer>(modelPath);
}

}  // namespace skytrain::stages
