#include "stages/data/token_data.h"

#include <torch/torch.h>
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "scheduler/error.h"
#include "stages/seeding.h"

namespace skytrain::stages {

struct TokenDataSource::Segment {
  const TokenFile* file = nullptr;
  uint64_t begin = 0;  // tokens [begin, end) of the file
  uint64_t end = 0;
};

struct TokenDataSource::Region {
  std::vector<Segment> segments;
  std::vector<uint64_t> startsBefore;  // window starts in the segments before segment k
  uint64_t starts = 0;                 // window starts in all of them
  uint64_t tokens = 0;
};

namespace {

constexpr uint64_t kValidationStream = ~0ULL;

// Ids shown as ids: a corpus tokenised elsewhere, with no tokenizer to decode it.
class IdTokenizer : public Tokenizer {
 public:
  explicit IdTokenizer(int vocab) : vocab_(vocab) {}
  std::string name() const override { return "token ids"; }
  int vocabSize() const override { return vocab_; }
  std::vector<int32_t> encode(const std::string&) const override {
    throw Error("a pre-tokenised corpus without a tokenizer cannot encode text (name data.sentencepiece_model)");
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (const auto id : ids) text += (text.empty() ? "" : " ") + std::to_string(id);
    return text;
  }

 private:
  int vocab_;
};

using Segment = TokenDataSource::Segment;
using Region = TokenDataSource::Region;

void addSegment(Region& region, Segment segment, uint64_t window) {
  region.tokens += segment.end - segment.begin;
  region.startsBefore.push_back(region.starts);
  if (segment.end - segment.begin >= window) region.starts += segment.end - segment.begin - window + 1;
  region.segments.push_back(segment);
}

}  // namespace

TokenDataSource::TokenDataSource(TokenDataOptions options) : options_(std::move(options)) {
  if (options_.sources.empty()) throw DataError("no token files given");
  if (!(options_.validationFraction > 0.0 && options_.validationFraction < 1.0)) {
    throw DataError("validation fraction must be in (0, 1), got " + std::to_string(options_.validationFraction));
  }
  if (!options_.sentencepieceModel.empty()) {
    tokenizer_ = makeSentencePieceTokenizer(options_.sentencepieceModel);
  } else if (options_.vocabSize == 256) {
    tokenizer_ = makeByteTokenizer();
  } else {
    tokenizer_ = std::make_unique<IdTokenizer>(options_.vocabSize);
  }
  const uint64_t window = static_cast<uint64_t>(options_.seqLen) + 1;
  auto open = [this](const std::string& path) {
    files_.push_back(std::make_unique<TokenFile>(path, options_.flatDtype));
    return files_.back().get();
  };
  double total = 0;
  for (size_t s = 0; s < options_.sources.size(); ++s) {
    const auto& source = options_.sources[s];
    if (source.files.empty()) throw DataError("source " + std::to_string(s) + " has no files");
    if (!(source.weight > 0)) throw DataError("source " + std::to_string(s) + " has weight " + std::to_string(source.weight));
    std::vector<const TokenFile*> shards;
    uint64_t tokens = 0;
    for (const auto& path : source.files) {
      shards.push_back(open(path));
      tokens += shards.back()->tokens();
    }
    // The held-out tail: the last validationFraction of the source's tokens, from its last shards.
    uint64_t held = options_.evalFiles.empty() ? static_cast<uint64_t>(tokens * options_.validationFraction) : 0;
    Region train, validation;
    std::vector<Segment> tail;
    for (auto it = shards.rbegin(); it != shards.rend(); ++it) {
      const uint64_t n = (*it)->tokens();
      const uint64_t cut = n - std::min(n, held);
      held -= n - cut;
      if (cut < n) tail.push_back({*it, cut, n});
      if (cut > 0) train.segments.insert(train.segments.begin(), Segment{*it, 0, cut});
    }
    auto segments = std::move(train.segments);
    train = Region{};
    for (const auto& seg : segments) addSegment(train, seg, window);
    for (auto it = tail.rbegin(); it != tail.rend(); ++it) addSegment(validation, *it, window);
    if (train.starts == 0) {
      throw DataError("source " + std::to_string(s) + " (" + std::to_string(tokens) +
                  " tokens) has no training shard part of " + std::to_string(window) + " tokens (seq_len + 1)");
    }
    train_.push_back(std::move(train));
    if (options_.evalFiles.empty()) {
      if (validation.starts == 0) {
        throw DataError("source " + std::to_string(s) + "'s held-out " + std::to_string(validation.tokens) +
                    " tokens hold no window of " + std::to_string(window) +
                    " (raise validation_fraction or give eval_files)");
      }
      validation_.push_back(std::move(validation));
    }
    total += source.weight;
    cumulativeWeight_.push_back(total);
  }
  for (auto& w : cumulativeWeight_) w /= total;
  if (!options_.evalFiles.empty()) {
    Region validation;
    for (const auto& path : options_.evalFiles) {
      const auto* file = open(path);
      addSegment(validation, {file, 0, file->tokens()}, window);
    }
    if (validation.starts == 0) throw DataError("eval_files hold no window of " + std::to_string(window) + " tokens");
    validation_.push_back(std::move(validation));
  }
}

TokenDataSource::~TokenDataSource() = default;

TokenBatch TokenDataSource::trainBatch(uint64_t step, int firstSample, int count) const {
  return gather(train_, step, firstSample, count);
}

TokenBatch TokenDataSource::validationBatch(int firstSample, int count) const {
  return gather(validation_, kValidationStream, firstSample, count);
}

TokenBatch TokenDataSource::gather(const std::vector<Region>& regions, uint64_t stream, int firstSample,
                                   int count) const {
  SKYTRAIN_CHECK(firstSample >= 0 && count >= 0, "bad sample range " << firstSample << "+" << count);
  const int64_t t = options_.seqLen;
  auto inputs = torch::empty({count, t}, torch::kLong);
  auto targets = torch::empty({count, t}, torch::kLong);
  auto* in = inputs.data_ptr<int64_t>();
  auto* out = targets.data_ptr<int64_t>();
  const uint64_t streamKey = splitmix64(options_.seed ^ splitmix64(stream));
  for (int j = 0; j < count; ++j) {
    const uint64_t draw = splitmix64(streamKey ^ splitmix64(static_cast<uint64_t>(firstSample + j) + 0x51ed));
    size_t r = 0;
    if (regions.size() > 1) {
      const double u = static_cast<double>(splitmix64(draw ^ 0xb1e4d) >> 11) * 0x1.0p-53;
      r = std::upper_bound(cumulativeWeight_.begin(), cumulativeWeight_.end(), u) - cumulativeWeight_.begin();
      r = std::min(r, regions.size() - 1);
    }
    const Region& region = regions[r];
    const uint64_t start = draw % region.starts;
    const size_t k = std::upper_bound(region.startsBefore.begin(), region.startsBefore.end(), start) -
                     region.startsBefore.begin() - 1;
    const Segment& seg = region.segments[k];
    const uint64_t first = seg.begin + (start - region.startsBefore[k]);
    for (int64_t i = 0; i <= t; ++i) {
      const int64_t id = seg.file->tokenAt(first + i);
      if (id < 0 || id >= options_.vocabSize) {
        throw DataError("token id " + std::to_string(id) + " at byte " + std::to_string(seg.file->byteOffset(first + i)) +
                    " of \"" + seg.file->path() + "\" is outside the model's vocabulary of " +
                    std::to_string(options_.vocabSize));
      }
      if (i < t) in[j * t + i] = id;
      if (i > 0) out[j * t + i - 1] = id;
    }
  }
  return {inputs, targets};
}

uint64_t TokenDataSource::trainTokens() const {
  uint64_t n = 0;
  for (const auto& r : train_) n += r.tokens;
  return n;
}

uint64_t TokenDataSource::validationTokens() const {
  uint64_t n = 0;
  for (const auto& r : validation_) n += r.tokens;
  return n;
}

uint64_t TokenDataSource::documents() const {
  uint64_t n = 0;
  for (const auto& f : files_) n += f->documents();
  return n;
}

std::string TokenDataSource::fingerprint() const {
  std::string identity;
  for (const auto& f : files_) {
    identity += std::filesystem::path(f->path()).filename().string() + "|" + dtypeName(f->dtype()) + "|" + std::to_string(f->tokens()) + "|" +
                std::to_string(f->documents()) + "\n";
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64(identity.data(), identity.size(), 0)));
  return hex;
}

}  // namespace skytrain::stages
