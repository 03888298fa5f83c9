#include "stages/data/text_data.h"

#include <torch/torch.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "scheduler/error.h"
#include "stages/seeding.h"

namespace skytrain::stages {
namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("data file \"" + path + "\" cannot be read: " + std::string(std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error("data file \"" + path + "\": read error");
  return text.str();
}

constexpr uint64_t kValidationStream = ~0ULL;

}  // namespace

TextDataSource::TextDataSource(TextDataOptions options) : options_(std::move(options)) {
  if (options_.files.empty()) throw DataError("no files given");
  if (!(options_.validationFraction > 0.0 && options_.validationFraction < 1.0)) {
    throw DataError("validation fraction must be in (0, 1), got " + std::to_string(options_.validationFraction));
  }
  tokenizer_ = options_.sentencepieceModel.empty() ? makeByteTokenizer()
                                                   : makeSentencePieceTokenizer(options_.sentencepieceModel);
  std::vector<int32_t> tokens, held;
  for (const auto& file : options_.files) {
    auto ids = tokenizer_->encode(readFile(file));
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  for (const auto& file : options_.evalFiles) {
    auto ids = tokenizer_->encode(readFile(file));
    held.insert(held.end(), ids.begin(), ids.end());
  }
  if (!options_.evalFiles.empty()) {  // a separate validation set: train on all of files
    tokens.insert(tokens.end(), held.begin(), held.end());
  }
  const size_t validationSize = options_.evalFiles.empty() ? static_cast<size_t>(tokens.size() * options_.validationFraction)
                                                           : held.size();
  const size_t needed = static_cast<size_t>(options_.seqLen) + 1;
  if (validationSize < needed || tokens.size() - validationSize < needed) {
    throw DataError(std::to_string(tokens.size()) + " tokens are too few for sequences of " +
                std::to_string(options_.seqLen) + " in both the train and validation splits");
  }
  train_.assign(tokens.begin(), tokens.end() - validationSize);
  validation_.assign(tokens.end() - validationSize, tokens.end());
}

TokenBatch TextDataSource::trainBatch(uint64_t step, int firstSample, int count) const {
  return gather(train_, step, firstSample, count);
}

TokenBatch TextDataSource::validationBatch(int firstSample, int count) const {
  return gather(validation_, kValidationStream, firstSample, count);
}

TokenBatch TextDataSource::gather(const std::vector<int32_t>& tokens, uint64_t stream, int firstSample,
                                  int count) const {
  SKYTRAIN_CHECK(firstSample >= 0 && count >= 0, "bad sample range " << firstSample << "+" << count);
  const int64_t t = options_.seqLen;
  const uint64_t positions = tokens.size() - t;  // valid starts: [0, size - t - 1]
  auto inputs = torch::empty({count, t}, torch::kLong);
  auto targets = torch::empty({count, t}, torch::kLong);
  auto* in = inputs.data_ptr<int64_t>();
  auto* out = targets.data_ptr<int64_t>();
  const uint64_t streamKey = splitmix64(options_.seed ^ splitmix64(stream));
  for (int j = 0; j < count; ++j) {
    const uint64_t sample = static_cast<uint64_t>(firstSample + j);
    const uint64_t start = splitmix64(streamKey ^ splitmix64(sample + 0x51ed)) % positions;
    for (int64_t k = 0; k < t; ++k) {
      in[j * t + k] = tokens[start + k];
      out[j * t + k] = tokens[start + k + 1];
    }
  }
  return {inputs, targets};
}

}  // namespace skytrain::stages
