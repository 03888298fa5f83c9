#include "client/data_prepare.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "scheduler/error.h"
#include "stages/seeding.h"
#include "stages/tokens/token_files.h"
#include "stages/tokens/token_manifest.h"
#include "stages/tokens/tokenizer.h"

namespace skytrain::client {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr size_t kBatchBytes = 32 << 20;  // text tokenised together, split across the threads

// Reads documents from the inputs in order, a batch of about kBatchBytes at a time.
class DocumentReader {
 public:
  explicit DocumentReader(const PrepareOptions& o) : o_(o) {
    for (const auto& file : o_.inputs) {
      std::error_code ec;
      const auto size = fs::file_size(file, ec);
      if (ec || !fs::is_regular_file(file, ec)) throw Error("input \"" + file + "\" is not a readable regular file");
      totalBytes_ += size;
    }
  }

  // The next documents; empty at the end.
  std::vector<std::string> next() {
    std::vector<std::string> batch;
    size_t bytes = 0;
    while (bytes < kBatchBytes) {
      if (!in_.is_open()) {
        if (!openNext()) break;
      }
      std::string line;
      if (!std::getline(in_, line)) {
        flush(batch, bytes);
        in_.close();
        continue;
      }
      ++lineNumber_;
      readBytes_ += line.size() + 1;
      if (jsonl_) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        batch.push_back(fieldOf(line));
        bytes += batch.back().size();
      } else if (o_.split == "line") {
        if (!line.empty()) batch.push_back(line + "\n"), bytes += line.size() + 1;
      } else if (o_.split == "blank" && line.find_first_not_of(" \t\r") == std::string::npos) {
        flush(batch, bytes);
      } else {
        pending_ += line + "\n";
      }
    }
    return batch;
  }

  uint64_t totalBytes() const { return totalBytes_; }
  uint64_t readBytes() const { return readBytes_; }

 private:
  bool openNext() {
    if (file_ >= o_.inputs.size()) return false;
    path_ = o_.inputs[file_++];
    in_ = std::ifstream(path_, std::ios::binary);
    if (!in_) throw Error("input \"" + path_ + "\" cannot be read: " + std::string(std::strerror(errno)));
    lineNumber_ = 0;
    jsonl_ = o_.format == "jsonl" || (o_.format == "auto" && (fs::path(path_).extension() == ".jsonl" ||
                                                              fs::path(path_).extension() == ".ndjson"));
    return true;
  }

  void flush(std::vector<std::string>& batch, size_t& bytes) {
    if (pending_.empty()) return;
    bytes += pending_.size();
    batch.push_back(std::move(pending_));
    pending_.clear();
  }

  std::string fieldOf(const std::string& line) const {
    const std::string where = "\"" + path_ + "\" line " + std::to_string(lineNumber_);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": not JSON (" + e.what() + ")");
    }
    const auto it = j.is_object() ? j.find(o_.field) : j.end();
    if (it == j.end() || !it->is_string()) throw Error(where + ": no string field \"" + o_.field + "\"");
    return it->get<std::string>();
  }

  const PrepareOptions& o_;
  size_t file_ = 0;
  std::string path_;
  std::ifstream in_;
  bool jsonl_ = false;
  uint64_t lineNumber_ = 0;
  std::string pending_;
  uint64_t totalBytes_ = 0;
  uint64_t readBytes_ = 0;
};

// Tokenises a batch on `threads` threads, each a contiguous share of the documents.
std::vector<std::vector<int32_t>> encode(const stages::Tokenizer& tokenizer, const std::vector<std::string>& docs,
                                         int threads, int64_t eod) {
  std::vector<std::vector<int32_t>> out(docs.size());
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(threads);
  const size_t share = (docs.size() + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        for (size_t i = t * share; i < std::min(docs.size(), (t + 1) * share); ++i) {
          out[i] = tokenizer.encode(docs[i]);
          if (eod >= 0) out[i].push_back(static_cast<int32_t>(eod));
        }
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  for (auto& thread : pool) thread.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

// Shards of one split (train or validation), opened as they fill.
class ShardSet {
 public:
  ShardSet(const PrepareOptions& o, std::string prefix, stages::TokenDtype dtype)
      : o_(o), prefix_(std::move(prefix)), dtype_(dtype) {}

  void append(const std::vector<int32_t>& doc) {
    if (!writer_) {
      char name[64];
      std::snprintf(name, sizeof name, "%s-%05zu.bin", prefix_.c_str(), names_.size());
      names_.push_back(name);
      writer_ = std::make_unique<stages::TokenShardWriter>((fs::path(o_.output) / name).string(), dtype_,
                                                           o_.layout == "indexed");
    }
    writer_->append(doc);
    ++documents_;
    tokens_ += doc.size();
    if (writer_->tokens() >= o_.shardTokens) finish();
  }
  void finish() {
    if (writer_) writer_->finish();
    writer_.reset();
  }
  const std::vector<std::string>& names() const { return names_; }
  uint64_t documents() const { return documents_; }
  uint64_t tokens() const { return tokens_; }

 private:
  const PrepareOptions& o_;
  std::string prefix_;
  stages::TokenDtype dtype_;
  std::unique_ptr<stages::TokenShardWriter> writer_;
  std::vector<std::string> names_;
  uint64_t documents_ = 0;
  uint64_t tokens_ = 0;
};

void drawProgress(uint64_t done, uint64_t total, double seconds) {
  const double share = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const int width = 30, filled = static_cast<int>(share * width);
  std::fprintf(stderr, "\r[%s%s] %5.1f%%  %.0f MB  %.1f MB/s", std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), 100.0 * share, done / 1e6,
               seconds > 0 ? done / 1e6 / seconds : 0.0);
  std::fflush(stderr);
}

stages::TokenDtype chooseDtype(const PrepareOptions& o, int vocab) {
  if (o.dtype != "auto") return stages::tokenDtype(o.dtype);
  if (vocab <= 65536) return stages::TokenDtype::U16;
  return o.layout == "flat" ? stages::TokenDtype::U32 : stages::TokenDtype::I32;
}

}  // namespace

uint64_t parseCount(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw Error("\"" + text + "\" is not a count (e.g. 100M, 1G)");
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() ? 1 : unit == "K" ? 1e3 : unit == "M" ? 1e6 : unit == "G" ? 1e9 : 0;
  if (scale == 0 || !(value * scale >= 1) || value * scale > 1e15) throw Error("\"" + text + "\" is not a count (e.g. 100M, 1G)");
  return static_cast<uint64_t>(value * scale);
}

int prepareData(const PrepareOptions& o) {
  if (o.inputs.empty()) throw Error("data prepare: no input files");
  if (o.layout != "indexed" && o.layout != "flat") throw Error("--layout must be indexed or flat");
  if (o.split != "blank" && o.split != "line" && o.split != "file") throw Error("--split must be blank, line or file");
  if (!(o.validation >= 0 && o.validation < 1)) throw Error("--validation must be in [0, 1)");
  std::error_code ec;
  if (fs::exists(o.output, ec) && !fs::is_empty(o.output, ec)) {
    throw Error("output \"" + o.output + "\" exists and is not empty");
  }
  fs::create_directories(o.output, ec);
  if (ec) throw Error("output \"" + o.output + "\" cannot be created: " + ec.message());
  auto tokenizer = o.sentencepiece.empty() ? stages::makeByteTokenizer() : stages::makeSentencePieceTokenizer(o.sentencepiece);
  const int vocab = tokenizer->vocabSize();
  if (o.eod >= vocab) throw Error("--eod " + std::to_string(o.eod) + " is outside the tokenizer's vocabulary of " + std::to_string(vocab));
  const auto dtype = chooseDtype(o, vocab);
  const int threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());

  DocumentReader reader(o);
  ShardSet train(o, "train", dtype), validation(o, "val", dtype);
  const auto start = Clock::now();
  const bool bar = o.progress && ::isatty(STDERR_FILENO);
  uint64_t index = 0;
  for (auto docs = reader.next(); !docs.empty(); docs = reader.next()) {
    for (auto& ids : encode(*tokenizer, docs, threads, o.eod)) {
      const double u = static_cast<double>(stages::splitmix64(index++ ^ 0xda7a) >> 11) * 0x1.0p-53;
      (u < o.validation ? validation : train).append(ids);
    }
    if (bar) drawProgress(reader.readBytes(), reader.totalBytes(), std::chrono::duration<double>(Clock::now() - start).count());
  }
  train.finish();
  validation.finish();
  if (bar) std::fputc('\n', stderr);
  if (train.tokens() == 0) throw Error("data prepare: the inputs hold no training text");

  stages::TokenManifest manifest;
  manifest.layout = o.layout;
  manifest.dtype = stages::dtypeName(dtype);
  manifest.tokenizer = o.sentencepiece.empty() ? "byte" : "sentencepiece:" + fs::path(o.sentencepiece).filename().string();
  manifest.vocabSize = vocab;
  manifest.documents = train.documents() + validation.documents();
  manifest.tokens = train.tokens() + validation.tokens();
  manifest.train = train.names();
  manifest.validation = validation.names();
  const std::string manifestPath = (fs::path(o.output) / stages::kTokenManifestName).string();
  {
    std::ofstream out(manifestPath, std::ios::binary | std::ios::trunc);
    out << stages::tokenManifestJson(manifest);
    if (!out) throw Error("\"" + manifestPath + "\" cannot be written: " + std::string(std::strerror(errno)));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("%s: %llu documents, %llu tokens (%s, %s, vocabulary %d)\n", o.output.c_str(),
              static_cast<unsigned long long>(manifest.documents), static_cast<unsigned long long>(manifest.tokens),
              manifest.tokenizer.c_str(), manifest.dtype.c_str(), vocab);
  std::printf("  train:      %llu documents, %llu tokens in %zu shards\n", static_cast<unsigned long long>(train.documents()),
              static_cast<unsigned long long>(train.tokens()), train.names().size());
  std::printf("  validation: %llu documents, %llu tokens in %zu shards\n",
              static_cast<unsigned long long>(validation.documents()), static_cast<unsigned long long>(validation.tokens()),
              validation.names().size());
  std::printf("  %.1f MB of input in %.1f s on %d threads (%.1f MB/s)\n", reader.totalBytes() / 1e6, seconds, threads,
              seconds > 0 ? reader.totalBytes() / 1e6 / seconds : 0.0);
  return 0;
}

}  // namespace skytrain::client
