// Corpus BLEU as sacreBLEU computes it by default (BLEU with tokenize "13a", case kept,
// smoothing "exp", n-grams up to 4, one reference per hypothesis), so a translation's score
// reads against published ones.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace skytrain::stages {

struct BleuScore {
  double score = 0;                     // 0..100
  std::array<int64_t, 4> matches{};     // n-gram matches clipped by the reference's counts, n = 1..4
  std::array<int64_t, 4> totals{};      // the hypotheses' n-grams
  std::array<double, 4> precisions{};   // percent, smoothed where matches are 0
  double brevityPenalty = 1;
  int64_t hypothesisLength = 0;         // tokens, after 13a tokenisation
  int64_t referenceLength = 0;
};

// mteval-v13a's tokenisation, as sacreBLEU's "13a": "<skipped>" dropped, "-\n" joined,
// &quot; &amp; &lt; &gt; unescaped, ASCII punctuation other than . , - ' split off, a
// period or comma split off unless between digits, a dash after a digit split off; runs of
// whitespace (ASCII and the Unicode spaces) become one space, none at either end.
std::string tokenize13a(const std::string& line);

// Corpus BLEU: matches and totals summed over every sentence before the precisions are
// taken (not a mean of sentence scores). A zero match count of order n is smoothed to
// 1 / 2^k of that order's total (k counting the zero orders so far); brevity penalty
// exp(1 - r/c) when the hypotheses are shorter than the references, 0 for no tokens at all.
// Throws skytrain::Error when the counts of hypotheses and references differ.
BleuScore corpusBleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references);

}  // namespace skytrain::stages
