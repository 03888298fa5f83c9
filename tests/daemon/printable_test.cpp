// protocol::printable: what a terminal or a text log line shows of a peer's string.
#include <catch2/catch.hpp>

#include "daemon/protocol/printable.h"

using skytrain::protocol::printable;

TEST_CASE("printable keeps text and UTF-8 as they are") {
  CHECK(printable("gpt-web demo") == "gpt-web demo");
  CHECK(printable("Reina–Valera, días, 日本語") == "Reina–Valera, días, 日本語");
}

TEST_CASE("printable escapes what could forge a line, drive a terminal or reorder text") {
  CHECK(printable("a\nINFO forged") == "a\\x0aINFO forged");
  CHECK(printable("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m");
  CHECK(printable(std::string("nul\0here", 8)) == "nul\\x00here");
  CHECK(printable("tab\there\r") == "tab\\x09here\\x0d");
  CHECK(printable("del\x7f") == "del\\x7f");
  CHECK(printable("c1 \xc2\x9b" "31m") == "c1 \\x9b31m");                  // U+009B, the 8-bit CSI
  CHECK(printable("txt.\xe2\x80\xae" "exe") == "txt.\\u{202e}exe");         // right-to-left override
  CHECK(printable("\xe2\x81\xa6" "x\xe2\x81\xa9") == "\\u{2066}x\\u{2069}");  // isolates
  CHECK(printable("back\\slash") == "back\\\\slash");                       // escapes stay unambiguous
}

TEST_CASE("printable escapes bytes that are not UTF-8, one by one") {
  CHECK(printable("bad \xff\xfe end") == "bad \\xff\\xfe end");
  CHECK(printable("cut \xe6\x97") == "cut \\xe6\\x97");             // a truncated sequence
  CHECK(printable("over \xc0\xaf") == "over \\xc0\\xaf");           // an overlong '/'
  CHECK(printable("surrogate \xed\xa0\x80") == "surrogate \\xed\\xa0\\x80");
}

TEST_CASE("printable bounds what it shows") {
  const std::string long_(10000, 'x');
  const std::string shown = printable(long_, 100);
  CHECK(shown == std::string(100, 'x') + "...");
  CHECK(printable("abc", 3) == "abc");
}
