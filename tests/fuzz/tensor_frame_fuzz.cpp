// decodeFrame (compression/wire/tensor_frame.h) on any two parts: the first two input bytes
// (little-endian, capped at what is left) say where the header ends and the payload
// begins. A frame is decoded or refused with skytrain::Error; one that decodes encodes
// back to the same header bytes and keeps its payload.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "compression/wire/tensor_frame.h"
#include "scheduler/error.h"
#include "tests/fuzz/fuzz_check.h"

using namespace skytrain::compression;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t headerSize = std::min<size_t>(data[0] | (data[1] << 8), size - 2);
  // The header in a buffer of its own size, so ASan sees any read past it.
  const std::vector<uint8_t> header(data + 2, data + 2 + headerSize);
  const std::string payload(reinterpret_cast<const char*>(data) + 2 + headerSize, size - 2 - headerSize);
  TensorFrame frame;
  try {
    frame = decodeFrame(header.data(), header.size(), payload);
  } catch (const skytrain::Error&) {
    return 0;
  }
  const std::string again = encodeFrameHeader(frame);
  FUZZ_REQUIRE(again == std::string(header.begin(), header.end()), "the decoded frame encodes to another header");
  FUZZ_REQUIRE(frame.tensor.payload == payload, "the payload changed");
  return 0;
}
