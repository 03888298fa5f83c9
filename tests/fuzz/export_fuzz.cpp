// What `skytrain export` applies to a stage daemon's bytes: base64Decode on a chunk
// (daemon/protocol/base64.h) and the Torch-free safetensors header check before merging
// (compression/wire/safetensors_header.h). Each parses or refuses with skytrain::Error; a header it
// accepts describes tensors that tile the data part of the file exactly.
#include <cstddef>
#include <cstdint>
#include <string>

#include "compression/wire/safetensors_header.h"
#include "daemon/protocol/base64.h"
#include "scheduler/error.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    const std::string decoded = skytrain::protocol::base64Decode(bytes, 1 << 16);
    FUZZ_REQUIRE(decoded.size() <= bytes.size() / 4 * 3, "base64 decoded more than its text holds");
    FUZZ_REQUIRE(skytrain::protocol::base64Encode(decoded) == bytes, "base64 accepted a non-canonical text");
  } catch (const skytrain::Error&) {
  }
  try {
    const auto header = skytrain::compression::parseSafetensorsHeader(bytes, bytes.size(), "fuzz");
    uint64_t at = 0;
    for (const auto& t : header.tensors) {
      FUZZ_REQUIRE(t.begin == at && t.begin <= t.end, t.name);
      at = t.end;
    }
    FUZZ_REQUIRE(8 + header.headerBytes + at == bytes.size(), "tensors do not cover the data part");
  } catch (const skytrain::Error&) {
  }
  return 0;
}
