// Corpus BLEU with sacreBLEU 2.x's defaults; see bleu.h for the contract. Strings are UTF-8
// bytes: every rule of 13a names ASCII characters only, and a multi-byte character's bytes are
// all non-digit, non-punctuation bytes, so working on bytes gives what sacreBLEU gives on code
// points.
#include "stages/bleu.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "scheduler/error.h"

namespace skytrain::stages {
namespace {

constexpr int kOrder = 4;

void replaceAll(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

// The length in bytes of a whitespace character at s[i] (0: none): what Python's str.split()
// and str.rstrip() treat as whitespace, i.e. ASCII whitespace, \x1c..\x1f and the UTF-8
// encodings of the Unicode spaces.
size_t whitespaceAt(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f)) return 1;
  auto byte = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
  if (c == 0xc2 && (byte(1) == 0x85 || byte(1) == 0xa0)) return 2;  // NEL, no-break space
  if (c == 0xe1 && byte(1) == 0x9a && byte(2) == 0x80) return 3;    // ogham space mark
  if (c == 0xe2 && byte(1) == 0x80 && (byte(2) <= 0x8a || byte(2) == 0xa8 || byte(2) == 0xa9 || byte(2) == 0xaf)) {
    return 3;  // U+2000..200A, U+2028, U+2029, U+202F
  }
  if (c == 0xe2 && byte(1) == 0x81 && byte(2) == 0x9f) return 3;  // U+205F
  if (c == 0xe3 && byte(1) == 0x80 && byte(2) == 0x80) return 3;  // U+3000
  return 0;
}

// Python's str.split(): the words between runs of whitespace.
std::vector<std::string> splitWords(const std::string& s) {
  std::vector<std::string> out;
  std::string word;
  for (size_t i = 0; i < s.size();) {
    if (const size_t space = whitespaceAt(s, i)) {
      if (!word.empty()) out.push_back(std::move(word)), word.clear();
      i += space;
    } else {
      word += s[i++];
    }
  }
  if (!word.empty()) out.push_back(std::move(word));
  return out;
}

// Python's str.rstrip(). (Leading whitespace never changes 13a's tokens.)
std::string rstripWhitespace(const std::string& s) {
  size_t end = 0;  // one past the last non-whitespace byte
  for (size_t i = 0; i < s.size();) {
    const size_t space = whitespaceAt(s, i);
    i += space ? space : 1;
    if (!space) end = i;
  }
  return s.substr(0, end);
}

bool isDigit(unsigned char c) { return c >= '0' && c <= '9'; }
bool isNotDigit(unsigned char c) { return !isDigit(c); }
bool isPeriodOrComma(unsigned char c) { return c == '.' || c == ','; }
bool isDash(unsigned char c) { return c == '-'; }

// 13a's first class, split off everywhere: { | } ~  [ \ ] ^ _ `  space ! " # $ % &
// ( ) * +  : ; < = > ? @  /   (so not ' , - . nor digits and letters)
bool isSplitPunctuation(unsigned char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
         (c >= ':' && c <= '@') || c == '/';
}

// Where one of 13a's two-character rules puts spaces around a matched pair "ab".
enum class PairSpacing {
  kBetweenAndAfter,   // "a b "
  kBeforeAndBetween,  // " a b"
};

// One left-to-right pass of a two-character rule, each match consuming both characters and
// the output never rescanned: what Python's re.sub does with these fixed-width patterns.
std::string splitPairs(const std::string& s, bool (*first)(unsigned char), bool (*second)(unsigned char),
                       PairSpacing spacing) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (size_t i = 0; i < s.size(); ++i) {
    if (i + 1 < s.size() && first(static_cast<unsigned char>(s[i])) && second(static_cast<unsigned char>(s[i + 1]))) {
      if (spacing == PairSpacing::kBeforeAndBetween) out += ' ';
      out += s[i];
      out += ' ';
      out += s[i + 1];
      if (spacing == PairSpacing::kBetweenAndAfter) out += ' ';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

// 13a's tokens of one line (tokenize13a's output, split on its spaces).
std::vector<std::string> tokens13a(const std::string& line) {
  std::string s = rstripWhitespace(line);
  replaceAll(s, "<skipped>", "");
  replaceAll(s, "-\n", "");
  replaceAll(s, "\n", " ");
  if (s.find('&') != std::string::npos) {
    replaceAll(s, "&quot;", "\"");
    replaceAll(s, "&amp;", "&");
    replaceAll(s, "&lt;", "<");
    replaceAll(s, "&gt;", ">");
  }
  // Padded with a space at each end, so the pair rules see a non-digit before the first
  // character and after the last.
  std::string padded = " ";
  padded.reserve(s.size() * 2 + 2);
  for (const char c : s) {
    if (isSplitPunctuation(static_cast<unsigned char>(c))) {
      padded += ' ';
      padded += c;
      padded += ' ';
    } else {
      padded += c;
    }
  }
  padded += ' ';
  padded = splitPairs(padded, isNotDigit, isPeriodOrComma, PairSpacing::kBetweenAndAfter);  // no digit before
  padded = splitPairs(padded, isPeriodOrComma, isNotDigit, PairSpacing::kBeforeAndBetween);  // no digit after
  padded = splitPairs(padded, isDigit, isDash, PairSpacing::kBetweenAndAfter);               // dash after a digit
  return splitWords(padded);
}

// Counts of every n-gram, by order (index n - 1), keyed by its tokens joined with spaces
// (13a tokens hold no space, so the key is unambiguous).
using NgramCounts = std::array<std::unordered_map<std::string, int64_t>, kOrder>;

NgramCounts countNgrams(const std::vector<std::string>& tokens) {
  NgramCounts counts;
  for (size_t start = 0; start < tokens.size(); ++start) {
    std::string key = tokens[start];
    for (size_t n = 1; n <= kOrder && start + n <= tokens.size(); ++n) {
      if (n > 1) key += ' ' + tokens[start + n - 1];
      ++counts[n - 1][key];
    }
  }
  return counts;
}

// sacreBLEU's compute_bleu with smoothing "exp" and effective order off, from the summed
// counts and lengths already in `b`.
void scoreFromCounts(BleuScore& b) {
  const auto hypothesisLength = static_cast<double>(b.hypothesisLength);
  const auto referenceLength = static_cast<double>(b.referenceLength);
  b.brevityPenalty = 1;
  if (b.hypothesisLength < b.referenceLength) {
    b.brevityPenalty = b.hypothesisLength > 0 ? std::exp(1.0 - referenceLength / hypothesisLength) : 0.0;
  }
  // Not one n-gram of any order matched: 0, precisions left at 0 (sacreBLEU's early stop).
  if (b.matches == std::array<int64_t, kOrder>{}) return;
  double divisor = 1, logSum = 0;
  for (int n = 0; n < kOrder; ++n) {
    // No n-grams of this order (hypotheses shorter than n tokens): sacreBLEU stops here and
    // takes log(0) as -1e10, so the score is 0; the later precisions stay 0.
    if (b.totals[n] == 0) return;
    if (b.matches[n] == 0) {
      divisor *= 2;
      b.precisions[n] = 100.0 / (divisor * static_cast<double>(b.totals[n]));
    } else {
      b.precisions[n] = 100.0 * static_cast<double>(b.matches[n]) / static_cast<double>(b.totals[n]);
    }
    logSum += std::log(b.precisions[n]);
  }
  b.score = b.brevityPenalty * std::exp(logSum / kOrder);
}

}  // namespace

std::string tokenize13a(const std::string& line) {
  std::string out;
  for (const auto& token : tokens13a(line)) {
    if (!out.empty()) out += ' ';
    out += token;
  }
  return out;
}

BleuScore corpusBleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references) {
  if (hypotheses.size() != references.size()) {
    throw Error("BLEU: " + std::to_string(hypotheses.size()) + " hypotheses but " + std::to_string(references.size()) +
                " references");
  }
  BleuScore b;
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    const auto hypothesis = tokens13a(hypotheses[i]);
    const auto reference = tokens13a(references[i]);
    b.hypothesisLength += static_cast<int64_t>(hypothesis.size());
    b.referenceLength += static_cast<int64_t>(reference.size());
    const NgramCounts referenceCounts = countNgrams(reference);
    const NgramCounts hypothesisCounts = countNgrams(hypothesis);
    for (int n = 0; n < kOrder; ++n) {
      for (const auto& [gram, count] : hypothesisCounts[n]) {
        b.totals[n] += count;
        const auto it = referenceCounts[n].find(gram);
        if (it != referenceCounts[n].end()) b.matches[n] += std::min(count, it->second);
      }
    }
  }
  scoreFromCounts(b);
  return b;
}

}  // namespace skytrain::stages
