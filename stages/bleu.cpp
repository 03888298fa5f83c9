#include "stages/bleu.h"

#include <cmath>
#include <map>

#include "scheduler/error.h"

namespace skytrain::stages {
namespace {

constexpr int kOrder = 4;

void replaceAll(std::string& s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
}

bool isDigit(unsigned char c) { return c >= '0' && c <= '9'; }

// 13a's first class: { | } ~  [ \ ] ^ _ `  space ! " # $ % &  ( ) * +  : ; < = > ? @  /
bool isSplitPunctuation(unsigned char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
         (c >= ':' && c <= '@') || c == '/';
}

// One left-to-right pass of a two-character substitution `(a)(b)` -> left a middle b right,
// matches not overlapping (as Python's re.sub does for these fixed-width patterns).
template <typename First, typename Second>
std::string substitutePairs(const std::string& s, First first, Second second, const char* middle, const char* right,
                            const char* left = "") {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  for (size_t i = 0; i < s.size(); ++i) {
    const auto a = static_cast<unsigned char>(s[i]);
    if (i + 1 < s.size() && first(a) && second(static_cast<unsigned char>(s[i + 1]))) {
      out += left;
      out += s[i];
      out += middle;
      out += s[i + 1];
      out += right;
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The length in bytes of a whitespace character at s[i] (0: none): ASCII whitespace and
// the UTF-8 encodings of the Unicode spaces Python's str.split() splits on.
size_t whitespaceAt(const std::string& s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f)) return 1;
  auto byte = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
  if (c == 0xc2 && (byte(1) == 0x85 || byte(1) == 0xa0)) return 2;                      // NEL, no-break space
  if (c == 0xe1 && byte(1) == 0x9a && byte(2) == 0x80) return 3;                        // ogham space
  if (c == 0xe2 && byte(1) == 0x80 && (byte(2) <= 0x8a || byte(2) == 0xa8 || byte(2) == 0xa9 || byte(2) == 0xaf)) {
    return 3;                                                                           // U+2000..200A, 2028, 2029, 202F
  }
  if (c == 0xe2 && byte(1) == 0x81 && byte(2) == 0x9f) return 3;                        // U+205F
  if (c == 0xe3 && byte(1) == 0x80 && byte(2) == 0x80) return 3;                        // U+3000
  return 0;
}

std::vector<std::string> words(const std::string& s) {
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

using Counts = std::map<std::vector<std::string>, int64_t>;

Counts ngrams(const std::vector<std::string>& tokens) {
  Counts out;
  for (size_t n = 1; n <= kOrder; ++n) {
    for (size_t i = 0; i + n <= tokens.size(); ++i) ++out[std::vector<std::string>(tokens.begin() + i, tokens.begin() + i + n)];
  }
  return out;
}

}  // namespace

std::string tokenize13a(const std::string& line) {
  std::string s = line;
  replaceAll(s, "<skipped>", "");
  replaceAll(s, "-\n", "");
  replaceAll(s, "\n", " ");
  if (s.find('&') != std::string::npos) {
    replaceAll(s, "&quot;", "\"");
    replaceAll(s, "&amp;", "&");
    replaceAll(s, "&lt;", "<");
    replaceAll(s, "&gt;", ">");
  }
  std::string padded;
  padded.reserve(s.size() * 2 + 2);
  padded += ' ';
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
  auto periodOrComma = [](unsigned char c) { return c == '.' || c == ','; };
  auto notDigit = [](unsigned char c) { return !isDigit(c); };
  padded = substitutePairs(padded, notDigit, periodOrComma, " ", " ");
  padded = substitutePairs(padded, periodOrComma, notDigit, " ", "", " ");
  padded = substitutePairs(padded, isDigit, [](unsigned char c) { return c == '-'; }, " ", " ");
  std::string out;
  for (const auto& word : words(padded)) out += (out.empty() ? "" : " ") + word;
  return out;
}

BleuScore corpusBleu(const std::vector<std::string>& hypotheses, const std::vector<std::string>& references) {
  if (hypotheses.size() != references.size()) {
    throw Error("BLEU: " + std::to_string(hypotheses.size()) + " hypotheses but " + std::to_string(references.size()) +
                " references");
  }
  BleuScore b;
  for (size_t i = 0; i < hypotheses.size(); ++i) {
    // sacreBLEU strips trailing whitespace before tokenising; 13a drops the rest.
    const auto hypothesis = words(tokenize13a(hypotheses[i]));
    const auto reference = words(tokenize13a(references[i]));
    b.hypothesisLength += static_cast<int64_t>(hypothesis.size());
    b.referenceLength += static_cast<int64_t>(reference.size());
    const Counts referenceCounts = ngrams(reference);
    for (const auto& [gram, count] : ngrams(hypothesis)) {
      const size_t n = gram.size() - 1;
      b.totals[n] += count;
      const auto it = referenceCounts.find(gram);
      if (it != referenceCounts.end()) b.matches[n] += std::min(count, it->second);
    }
  }
  if (b.hypothesisLength == 0) {
    b.brevityPenalty = 0;
    return b;
  }
  if (b.hypothesisLength < b.referenceLength) {
    b.brevityPenalty = std::exp(1.0 - static_cast<double>(b.referenceLength) / static_cast<double>(b.hypothesisLength));
  }
  double smoothing = 1, logSum = 0;
  for (int n = 0; n < kOrder; ++n) {
    if (b.totals[n] == 0) return b;  // no n-grams of this order at all: BLEU is 0
    if (b.matches[n] == 0) {
      smoothing *= 2;
      b.precisions[n] = 100.0 / (smoothing * static_cast<double>(b.totals[n]));
    } else {
      b.precisions[n] = 100.0 * static_cast<double>(b.matches[n]) / static_cast<double>(b.totals[n]);
    }
    logSum += std::log(b.precisions[n]);
  }
  b.score = b.brevityPenalty * std::exp(logSum / kOrder);
  return b;
}

}  // namespace skytrain::stages
