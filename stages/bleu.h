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

// mteval-v13a's tokenisation, as sacreBLEU's "13a" applies it (after its rstrip): trailing
// whitespace dropped, "<skipped>" dropped, "-\n" joined, other newlines made spaces,
// &quot; &amp; &lt; &gt; unescaped; ASCII punctuation other than ' , - . split off; a
// period or comma split off unless a digit precedes it and another follows (3.5, 1,000 stay
// whole); a dash after a digit split off (5-3, but well-known and x-5 stay whole); runs of
// whitespace (ASCII and the Unicode spaces) become one space, none at either end. Bytes of
// non-ASCII characters are left as they are.
std::string tokenize13a(const std::string& line);

// Corpus BLEU: matches and totals summed over every sentence before the precisions are
// taken (not a mean of sentence scores). A zero match count of order n counts as 1/2^k of a
// match (smoothing "exp", k counting the zero orders so far). Score 0, precisions 0,
// when no n-gram of any order matches; score 0 when some order has no n-grams at all (every
// hypothesis shorter than n tokens). Brevity penalty exp(1 - r/c) when c < r, 0 when c = 0
// < r, else 1. Throws skytrain::Error when the counts of hypotheses and references differ.
BleuScore corpusBleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references);

}  // namespace skytrain::stages
