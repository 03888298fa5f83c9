// The key file parsers (daemon/protocol/keys.h) on the same bytes: authorized_keys,
// known_daemons and a secret key file. Each parses or refuses with skytrain::Error, and
// every key they accept is what isZ85Key promises: 40 characters of the Z85 alphabet.
#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/protocol/keys.h"
#include "scheduler/error.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace skytrain::protocol;

constexpr const char* kZ85Alphabet =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

void checkKey(const std::string& key, const char* what) {
  FUZZ_REQUIRE(key.size() == kZ85KeyLength && key.find_first_not_of(kZ85Alphabet) == std::string::npos,
               std::string(what) + " accepted a key that is not 40 Z85 characters: \"" + key + "\"");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& [key, entry] : parseAuthorizedKeys(text, "fuzz")) {
      checkKey(key, "parseAuthorizedKeys");
      FUZZ_REQUIRE(entry.publicKey == key, key);
    }
  } catch (const skytrain::Error&) {
  }
  try {
    for (const auto& entry : parseKnownDaemons(text, "fuzz")) checkKey(entry.second, "parseKnownDaemons");
  } catch (const skytrain::Error&) {
  }
  try {
    const KeyPair keys = parseKeyPair(text, "fuzz");
    checkKey(keys.secretKey, "parseKeyPair");
    checkKey(keys.publicKey, "parseKeyPair");
  } catch (const skytrain::Error&) {
  }
  return 0;
}
