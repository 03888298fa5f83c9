#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "scheduler/error.h"
#include "stages/data/text_data.h"
#include "stages/tokens/tokenizer.h"

using namespace skytrain::stages;

namespace {

TextDataOptions bibleOptions(uint64_t seed = 1) {
  TextDataOptions o;
  o.files = {SKYTRAIN_TEST_CORPUS};
  o.seqLen = 32;
  o.seed = seed;
  return o;
}

}  // namespace

TEST_CASE("the Bible corpus loads and splits off a held-out validation tail") {
  TextDataSource data(bibleOptions());
  CHECK(data.trainTokens() > 5'000'000);
  CHECK(data.validationTokens() == Approx(0.05 * (data.trainTokens() + data.validationTokens())).epsilon(0.001));
  const auto batch = data.trainBatch(0, 0, 4);
  CHECK(batch.inputs.sizes() == torch::IntArrayRef({4, 32}));
  // targets are the inputs shifted by one token
  CHECK(torch::equal(batch.inputs.slice(1, 1), batch.targets.slice(1, 0, 31)));
}

TEST_CASE("batches depend only on (seed, step, sample index)") {
  TextDataSource a(bibleOptions(1)), b(bibleOptions(1)), c(bibleOptions(2));
  const auto whole = a.trainBatch(7, 0, 8);
  // Any micro-batch split of a step sees the same sequences.
  for (int m : {1, 2, 4, 8}) {
    const int size = 8 / m;
    for (int i = 0; i < m; ++i) {
      CHECK(torch::equal(b.trainBatch(7, i * size, size).inputs, whole.inputs.slice(0, i * size, (i + 1) * size)));
    }
  }
  CHECK_FALSE(torch::equal(a.trainBatch(8, 0, 8).inputs, whole.inputs));
  CHECK_FALSE(torch::equal(c.trainBatch(7, 0, 8).inputs, whole.inputs));
  CHECK(torch::equal(a.validationBatch(0, 4).inputs, b.validationBatch(0, 4).inputs));
}

TEST_CASE("the byte tokenizer is lossless") {
  auto t = makeByteTokenizer();
  const std::string text = "In the beginning, God\xe2\x80\x99s \x01\xff";
  CHECK(t->decode(t->encode(text)) == text);
  CHECK(t->vocabSize() == 256);
  CHECK_THROWS_AS(t->decode({300}), skytrain::Error);
}

TEST_CASE("missing files and too-short corpora are refused by name") {
  TextDataOptions o = bibleOptions();
  o.files = {"/nonexistent/corpus.txt"};
  CHECK_THROWS_WITH(TextDataSource(o), Catch::Contains("/nonexistent/corpus.txt"));
  const auto tiny = std::filesystem::temp_directory_path() / "skytrain_tiny.txt";
  std::ofstream(tiny) << "too short";
  o.files = {tiny.string()};
  CHECK_THROWS_WITH(TextDataSource(o), Catch::Contains("too few"));
}

TEST_CASE("a SentencePiece model trained on the corpus tokenizes it") {
  const auto dir = std::filesystem::temp_directory_path() / "skytrain_spm_test";
  std::filesystem::create_directories(dir);
  const std::string prefix = (dir / "web").string();
  // spm_train comes with Debian's sentencepiece package (deploy/install-deps.sh).
  const std::string command = "spm_train --input=" SKYTRAIN_TEST_CORPUS " --model_prefix=" + prefix +
                              " --vocab_size=500 --input_sentence_size=20000 --shuffle_input_sentence=true"
                              " --minloglevel=2 > " + prefix + ".log 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  auto t = makeSentencePieceTokenizer(prefix + ".model");
  CHECK(t->vocabSize() == 500);
  const auto ids = t->encode("In the beginning, God created the heavens and the earth.");
  CHECK(ids.size() < 30);
  CHECK(t->decode(ids) == "In the beginning, God created the heavens and the earth.");
  TextDataOptions o = bibleOptions();
  o.sentencepieceModel = prefix + ".model";
  TextDataSource data(o);
  CHECK(data.trainBatch(0, 0, 2).inputs.max().item<int64_t>() < 500);
  CHECK_THROWS_WITH(makeSentencePieceTokenizer("/nonexistent.model"), Catch::Contains("/nonexistent.model"));
}
