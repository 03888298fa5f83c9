// Failures the fuzzers found in code outside tests/fuzz, tolerated until they are fixed so
// that every run still looks for new ones (docs/SECURITY.md lists them). Each names its
// reproducer under tests/fuzz/crashes/. SKYTRAIN_FUZZ_STRICT=1 tolerates none, to check a
// fix against its reproducer; delete the entry once the fix lands.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>

namespace skytrain::fuzz {

inline bool strict() { return std::getenv("SKYTRAIN_FUZZ_STRICT") != nullptr; }

// crashes/json_number_overflow.json: parseBoundedJson (daemon/protocol/json_reader.cpp)
// maps json::parse_error to SpecError but not json::out_of_range 406, which nlohmann throws
// for a number beyond a double ("1e999"); it escapes parseJobSpec and parseControlMessage
// as a nlohmann exception instead of skytrain::SpecError / WireError.
inline bool knownJsonNumberOverflow(const nlohmann::json::out_of_range& e) { return !strict() && e.id == 406; }

// crashes/z85_key_with_nul.txt: isZ85Key (daemon/protocol/keys.cpp) checks the length, then
// lets zmq_z85_decode judge the characters; that stops at the first NUL, so 40 bytes with a
// NUL after a multiple of 5 valid characters pass as a key.
inline bool knownZ85KeyWithNul(const std::string& key) { return !strict() && key.find('\0') != std::string::npos; }

}  // namespace skytrain::fuzz
