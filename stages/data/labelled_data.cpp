#include "stages/data/labelled_data.h"

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

#include "scheduler/error.h"
#include "stages/seeding.h"

namespace skytrain::stages {
LabelledDataSource::LabelledDataSource(LabelledDataOptions options) : options_(std::move(options)) {
  if (options_.files.empty()) throw DataError("no files given");
  if (options_.classes.size() < 2) throw DataError("a classifier needs at least two classes");
  tokenizer_ = options_.sentencepieceModel.empty() ? makeByteTokenizer()
                                                   : makeSentencePieceTokenizer(options_.sentencepieceModel);
  std::vector<Example> all = read(options_.files);
  if (options_.evalFiles.empty()) {
    // Files are often sorted by label (books in order): shuffle before holding out a share.
    std::mt19937_64 shuffle(splitmix64(options_.seed ^ 0x1abe1));
    std::shuffle(all.begin(), all.end(), shuffle);
    const size_t held = static_cast<size_t>(all.size() * options_.validationFraction);
    validation_.assign(std::make_move_iterator(all.end() - held), std::make_move_iterator(all.end()));
    all.resize(all.size() - held);
  } else {
    validation_ = read(options_.evalFiles);
  }
  train_ = std::move(all);
  if (train_.empty() || validation_.empty()) {
    throw DataError(std::to_string(train_.size()) + " training and " + std::to_string(validation_.size()) +
                " validation examples: neither may be empty");
  }
}

std::vector<LabelledDataSource::Example> LabelledDataSource::read(const std::vector<std::string>& files) const {
  std::map<std::string, int> index;
  for (size_t i = 0; i < options_.classes.size(); ++i) index[options_.classes[i]] = static_cast<int>(i);
  std::vector<Example> out;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error("data file \"" + file + "\" cannot be read: " + std::string(std::strerror(errno)));
    std::string line;
    for (size_t number = 1; std::getline(in, line); ++number) {
      if (line.empty()) continue;
      const auto tab = line.find('\t');
      const std::string where = file + ":" + std::to_string(number);
      if (tab == std::string::npos) throw Error("data " + where + ": expected \"label<TAB>text\"");
      const auto label = index.find(line.substr(0, tab));
      if (label == index.end()) {
        throw Error("data " + where + ": label \"" + line.substr(0, std::min<size_t>(tab, 64)) + "\" is not in model.classes");
      }
      Example e;
      e.tokens = tokenizer_->encode(line.substr(tab + 1));
      if (e.tokens.size() > static_cast<size_t>(options_.seqLen)) e.tokens.resize(options_.seqLen);
      e.label = label->second;
      out.push_back(std::move(e));
    }
  }
  return out;
}

TokenBatch LabelledDataSource::gather(const std::vector<const Example*>& examples) const {
  const int64_t count = static_cast<int64_t>(examples.size()), t = options_.seqLen;
  auto inputs = torch::full({count, t}, tokenizer_->vocabSize(), torch::kLong);  // the pad ID
  auto targets = torch::empty({count}, torch::kLong);
  auto* in = inputs.data_ptr<int64_t>();
  for (int64_t j = 0; j < count; ++j) {
    const auto& tokens = examples[j]->tokens;
    std::copy(tokens.begin(), tokens.end(), in + j * t);
    targets[j] = examples[j]->label;
  }
  return {inputs, targets};
}

TokenBatch LabelledDataSource::trainBatch(uint64_t step, int firstSample, int count) const {
  return gather(trainingPicks(train_, options_.seed, step, firstSample, count, 0x51ed));
}

TokenBatch LabelledDataSource::validationBatch(int firstSample, int count) const {
  return gather(validationPicks(validation_, firstSample, count));
}

}  // namespace skytrain::stages
