#include "stages/data/parallel_data.h"

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "scheduler/error.h"
#include "stages/seeding.h"
#include "stages/models/translation.h"

namespace skytrain::stages {

ParallelDataSource::ParallelDataSource(ParallelDataOptions options) : options_(std::move(options)) {
  if (options_.files.empty()) throw DataError("no files given");
  if (options_.seqLen < 2) throw DataError("a translation needs seq_len >= 2");
  tokenizer_ = options_.sentencepieceModel.empty() ? makeByteTokenizer()
                                                   : makeSentencePieceTokenizer(options_.sentencepieceModel);
  if (tokenizer_->vocabSize() + kTranslationSpecials > options_.vocabSize) {
    throw DataError("vocab_size " + std::to_string(options_.vocabSize) + " cannot hold tokenizer " +
                tokenizer_->name() + "'s " + std::to_string(tokenizer_->vocabSize()) + " IDs and [PAD], [BOS], [EOS]");
  }
  std::vector<Pair> all = read(options_.files, options_.evalFiles.empty());
  if (options_.evalFiles.empty()) {
    std::mt19937_64 shuffle(splitmix64(options_.seed ^ 0x9a7a1));
    std::shuffle(all.begin(), all.end(), shuffle);
    const size_t held = static_cast<size_t>(all.size() * options_.validationFraction);
    validation_.assign(std::make_move_iterator(all.end() - held), std::make_move_iterator(all.end()));
    all.resize(all.size() - held);
    for (auto& pair : all) pair.reference.clear();
  } else {
    validation_ = read(options_.evalFiles, true);
  }
  train_ = std::move(all);
  if (train_.empty() || validation_.empty()) {
    throw DataError(std::to_string(train_.size()) + " training and " + std::to_string(validation_.size()) +
                " validation pairs: neither may be empty");
  }
}

std::vector<ParallelDataSource::Pair> ParallelDataSource::read(const std::vector<std::string>& files, bool keepText) {
  std::vector<Pair> out;
  const size_t t = static_cast<size_t>(options_.seqLen);
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error("data file \"" + file + "\" cannot be read: " + std::string(std::strerror(errno)));
    std::string line;
    for (size_t number = 1; std::getline(in, line); ++number) {
      if (line.empty()) continue;
      const auto tab = line.find('\t');
      if (tab == std::string::npos) {
        throw Error("data " + file + ":" + std::to_string(number) + ": expected \"source<TAB>target\"");
      }
      Pair pair;
      pair.source = tokenizer_->encode(line.substr(0, tab));
      pair.target = tokenizer_->encode(line.substr(tab + 1));
      if (pair.source.size() > t || pair.target.size() + 1 > t) {
        ++skipped_;
        continue;
      }
      if (keepText) pair.reference = line.substr(tab + 1);
      out.push_back(std::move(pair));
    }
  }
  return out;
}

TokenBatch ParallelDataSource::gather(const std::vector<const Pair*>& pairs) const {
  const auto ids = translationIds(options_.vocabSize);
  const int64_t count = static_cast<int64_t>(pairs.size()), t = options_.seqLen;
  auto inputs = torch::full({count, t}, ids.pad, torch::kLong);
  auto targets = torch::full({count, t + 1}, ids.pad, torch::kLong);
  auto* in = inputs.data_ptr<int64_t>();
  auto* out = targets.data_ptr<int64_t>();
  for (int64_t j = 0; j < count; ++j) {
    const auto& p = *pairs[j];
    std::copy(p.source.begin(), p.source.end(), in + j * t);
    int64_t* row = out + j * (t + 1);
    row[0] = ids.bos;
    std::copy(p.target.begin(), p.target.end(), row + 1);
    row[1 + p.target.size()] = ids.eos;
  }
  return {inputs, targets};
}

TokenBatch ParallelDataSource::trainBatch(uint64_t step, int firstSample, int count) const {
  return gather(trainingPicks(train_, options_.seed, step, firstSample, count, 0x7a12));
}

TokenBatch ParallelDataSource::validationBatch(int firstSample, int count) const {
  return gather(validationPicks(validation_, firstSample, count));
}

std::string ParallelDataSource::validationReference(int sample) const {
  return validation_[static_cast<size_t>(sample) % validation_.size()].reference;
}

}  // namespace skytrain::stages
