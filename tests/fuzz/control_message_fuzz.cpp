// parseRequest (daemon/protocol/messages.h) on any bytes: a request is parsed or refused
// with skytrain::Error, and one that parses survives toJson + toText + parseRequest
// unchanged (the same type and the same JSON), as messages_test asserts for its cases.
#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/protocol/control.h"
#include "daemon/protocol/messages.h"
#include "scheduler/error.h"
#include "tests/fuzz/fuzz_check.h"

using namespace skytrain::protocol;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Envelope first;
  try {
    first = parseRequest(data, size);
  } catch (const skytrain::Error&) {
    return 0;
  }
  const nlohmann::json wire = toJson(first.request);
  const std::string text = toText(wire);
  Envelope second;
  try {
    second = parseRequest(text.data(), text.size());
  } catch (const skytrain::Error& e) {
    FUZZ_REQUIRE(false, text + " was refused when parsed again: " + e.what());
  }
  FUZZ_REQUIRE(typeName(second.request) == typeName(first.request), text);
  FUZZ_REQUIRE(toJson(second.request) == wire, text + " parsed again as " + toText(toJson(second.request)));
  return 0;
}
