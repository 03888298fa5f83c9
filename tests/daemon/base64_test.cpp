#include <catch2/catch.hpp>

#include "daemon/protocol/base64.h"
#include "scheduler/error.h"

using namespace skytrain::protocol;

TEST_CASE("base64 round-trips every length and matches RFC 4648's vectors") {
  CHECK(base64Encode("") == "");
  CHECK(base64Encode("f") == "Zg==");
  CHECK(base64Encode("fo") == "Zm8=");
  CHECK(base64Encode("foobar") == "Zm9vYmFy");
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    CHECK(base64Decode(base64Encode(bytes), 1 << 20) == bytes);
    bytes.push_back(static_cast<char>(i * 37));
  }
}

TEST_CASE("crafted base64 is refused") {
  CHECK_THROWS_AS(base64Decode("Zg=", 10), skytrain::WireError);    // not a multiple of 4
  CHECK_THROWS_AS(base64Decode("Z===", 10), skytrain::WireError);   // too much padding
  CHECK_THROWS_AS(base64Decode("Zg=a", 10), skytrain::WireError);   // data after padding
  CHECK_THROWS_AS(base64Decode("Zg==Zg==", 10), skytrain::WireError);  // padding inside
  CHECK_THROWS_AS(base64Decode("Zm9v\n===", 10), skytrain::WireError);
  CHECK_THROWS_AS(base64Decode("Zm6=", 10), skytrain::WireError);  // "fo" is Zm8=: bits under the padding
  CHECK_THROWS_AS(base64Decode("Zh==", 10), skytrain::WireError);  // "f" is Zg==
  CHECK_THROWS_WITH(base64Decode(std::string(400, 'A'), 100), Catch::Contains("over the limit"));
}
