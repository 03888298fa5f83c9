// Corpus BLEU (stages/bleu.h) against values worked out by hand with sacreBLEU 2.x's rules
// (tokenize 13a, smoothing exp, no effective order); sacreBLEU's own code gives the same.
#include <catch2/catch.hpp>

#include <cmath>

#include "scheduler/error.h"
#include "stages/bleu.h"

using skytrain::stages::corpusBleu;
using skytrain::stages::tokenize13a;

TEST_CASE("13a splits punctuation but keeps numbers, apostrophes and inner dashes") {
  // &quot; unescaped; " ( ) split off; 3.5 and 1,000 kept (a digit on both sides); the final
  // period split off; it's and well-known kept (' and a dash after a letter are not split).
  CHECK(tokenize13a("He said &quot;it's 3.5 or 1,000 well-known (x).&quot;") ==
        "He said \" it's 3.5 or 1,000 well-known ( x ) . \"");
  // "3." and ".5": a period with a non-digit on one side is split; a dash after a digit too.
  CHECK(tokenize13a("  costs 3. Then a,b and 5-3 but x-5!  ") == "costs 3 . Then a , b and 5 - 3 but x-5 !");
  CHECK(tokenize13a(".5 and a.b") == ". 5 and a . b");
  CHECK(tokenize13a("It costs $3.5.") == "It costs $ 3.5 .");
  CHECK(tokenize13a("") == "");
}

TEST_CASE("13a's line-level rules: skipped, newlines, entities, trailing whitespace") {
  CHECK(tokenize13a("a<skipped>b hy-\nphen\nnext") == "ab hyphen next");
  // sacreBLEU strips trailing whitespace first, so a final "-\n" keeps its dash.
  CHECK(tokenize13a("well-\n") == "well-");
  CHECK(tokenize13a("5-\n") == "5 -");
  // Entities are replaced in turn (&quot; &amp; &lt; &gt;): "&amp;lt;" -> "&lt;" -> "<".
  CHECK(tokenize13a("a &amp;lt; b") == "a < b");
  CHECK(tokenize13a("AT&T") == "AT & T");
}

TEST_CASE("13a leaves non-ASCII characters alone and splits on Unicode spaces") {
  CHECK(tokenize13a("Señor, ¿qué?") == "Señor , ¿qué ?");
  CHECK(tokenize13a("no\xc2\xa0" "break") == "no break");  // U+00A0 is whitespace to Python
}

TEST_CASE("identical sentences score 100") {
  const auto b = corpusBleu({"the cat is on the mat"}, {"the cat is on the mat"});
  CHECK(b.score == Approx(100.0));
  CHECK(b.brevityPenalty == 1.0);
}

TEST_CASE("a worked example: partial matches, a zero 4-gram count smoothed") {
  // hypothesis: the cat sat on the mat / reference: the cat is on the mat (6 tokens each)
  //   1-grams: the x2, cat, on, mat match           5 / 6  = 83.333%
  //   2-grams: "the cat", "on the", "the mat"        3 / 5  = 60%
  //   3-grams: "on the mat"                          1 / 4  = 25%
  //   4-grams: none; exp smoothing: 100 / (2 * 3)    = 16.667%
  //   BP = 1 (6 >= 6); BLEU = (83.333 * 60 * 25 * 16.667)^(1/4) = 2,083,333.3^(1/4) = 37.9918
  const auto b = corpusBleu({"the cat sat on the mat"}, {"the cat is on the mat"});
  CHECK(b.matches == std::array<int64_t, 4>{5, 3, 1, 0});
  CHECK(b.totals == std::array<int64_t, 4>{6, 5, 4, 3});
  CHECK(b.precisions[0] == Approx(500.0 / 6));
  CHECK(b.precisions[3] == Approx(100.0 / 6));
  CHECK(b.score == Approx(37.9918).epsilon(1e-5));
}

TEST_CASE("a short hypothesis pays the brevity penalty") {
  // "the cat is on" against "the cat is on the mat": every n-gram matches (4/4, 3/3, 2/2,
  // 1/1), c = 4 < r = 6: BP = exp(1 - 6/4) = exp(-0.5); BLEU = 100 * 0.60653 = 60.6531
  const auto b = corpusBleu({"the cat is on"}, {"the cat is on the mat"});
  CHECK(b.hypothesisLength == 4);
  CHECK(b.referenceLength == 6);
  CHECK(b.brevityPenalty == Approx(std::exp(-0.5)));
  CHECK(b.score == Approx(60.6531).epsilon(1e-5));
}

TEST_CASE("matches are clipped by the reference's counts") {
  // "the the the the" against "the cat": 1-grams clipped to 1 of 4 = 25%; 2-, 3-, 4-grams
  // match nothing: 100 / (2 * 3), 100 / (4 * 2), 100 / (8 * 1) = 16.667%, 12.5%, 12.5%;
  // BP = 1 (4 > 2); BLEU = (25 * 16.667 * 12.5 * 12.5)^(1/4) = 65,104.2^(1/4) = 15.9736
  const auto b = corpusBleu({"the the the the"}, {"the cat"});
  CHECK(b.matches == std::array<int64_t, 4>{1, 0, 0, 0});
  CHECK(b.precisions[2] == Approx(12.5));
  CHECK(b.score == Approx(15.9736).epsilon(1e-5));
}

TEST_CASE("corpus BLEU sums counts over sentences; it is not a mean of sentence scores") {
  // The two sentences above: matches 5+4, 3+3, 1+2, 0+1 of totals 6+4, 5+3, 4+2, 3+1
  // = 90%, 75%, 50%, 25%; c = 10 < r = 12: BP = exp(-0.2) = 0.81873;
  // BLEU = 0.81873 * (90 * 75 * 50 * 25)^(1/4) = 0.81873 * 53.8957 = 44.1260
  // (the mean of the sentence scores would be (37.99 + 60.65) / 2 = 49.32).
  const auto b =
      corpusBleu({"the cat sat on the mat", "the cat is on"}, {"the cat is on the mat", "the cat is on the mat"});
  CHECK(b.matches == std::array<int64_t, 4>{9, 6, 3, 1});
  CHECK(b.totals == std::array<int64_t, 4>{10, 8, 6, 4});
  CHECK(b.hypothesisLength == 10);
  CHECK(b.referenceLength == 12);
  CHECK(b.score == Approx(44.1260).epsilon(1e-5));
}

TEST_CASE("punctuation counts as tokens after 13a") {
  // "Yes, come." -> Yes , come . (4 tokens) against "Yes, come!" -> Yes , come ! (4):
  // 3/4, 2/3, 1/2, 4-grams 0 of 1 -> 100 / 2 = 50%; BLEU = (75 * 66.667 * 50 * 50)^(1/4)
  // = 12,500,000^(1/4) = 59.4604
  CHECK(corpusBleu({"Yes, come."}, {"Yes, come!"}).score == Approx(59.4604).epsilon(1e-5));
}

TEST_CASE("no match of any order scores 0, not a smoothed value") {
  // "a b c d" against "e f g h": smoothing alone would give (12.5 * 8.33 * 6.25 * 6.25)^(1/4)
  // = 7.99; sacreBLEU stops early at 0 and leaves the precisions at 0.
  const auto b = corpusBleu({"a b c d"}, {"e f g h"});
  CHECK(b.totals == std::array<int64_t, 4>{4, 3, 2, 1});
  CHECK(b.score == 0.0);
  CHECK(b.precisions == std::array<double, 4>{});
  CHECK(b.brevityPenalty == 1.0);
}

TEST_CASE("an order with no n-grams at all scores 0") {
  // "the cat" has no 3- or 4-grams: precisions 100, 100, then sacreBLEU stops; log(0) -> 0.
  const auto b = corpusBleu({"the cat"}, {"the cat"});
  CHECK(b.precisions == std::array<double, 4>{100, 100, 0, 0});
  CHECK(b.score == 0.0);
}

TEST_CASE("empty hypotheses score 0; counts must match") {
  const auto empty = corpusBleu({""}, {"the cat"});
  CHECK(empty.score == 0.0);
  CHECK(empty.brevityPenalty == 0.0);  // c = 0 < r = 2
  const auto bothEmpty = corpusBleu({""}, {""});
  CHECK(bothEmpty.score == 0.0);
  CHECK(bothEmpty.brevityPenalty == 1.0);  // c = r = 0: no penalty, as sacreBLEU
  CHECK(corpusBleu({}, {}).score == 0.0);
  CHECK_THROWS_AS(corpusBleu({"a"}, {}), skytrain::Error);
}
