#include <catch2/catch.hpp>

#include "compression/wire/tensor_frame.h"
#include "scheduler/error.h"

using namespace skytrain::compression;

namespace {

TensorFrame sampleFrame() {
  TensorFrame f;
  f.job = 0x0123456789abcdefULL;
  f.step = 42;
  f.microBatch = 3;
  f.stage = 1;
  f.direction = FrameDirection::Backward;
  f.tensor.codec = "none";
  f.tensor.dtype = WireDType::Float32;
  f.tensor.shape = {2, 3, 4};
  f.tensor.payload = std::string(2 * 3 * 4 * 4, '\x5a');
  return f;
}

}  // namespace

TEST_CASE("a frame survives encode and decode field by field") {
  const TensorFrame f = sampleFrame();
  const std::string header = encodeFrameHeader(f);
  CHECK(header.size() == kFrameFixedHeader + 3 * 8 + 4);
  const TensorFrame g = decodeFrame(header.data(), header.size(), f.tensor.payload);
  CHECK(g.job == f.job);
  CHECK(g.step == 42);
  CHECK(g.microBatch == 3);
  CHECK(g.stage == 1);
  CHECK(g.direction == FrameDirection::Backward);
  CHECK(g.tensor.codec == "none");
  CHECK(g.tensor.dtype == WireDType::Float32);
  CHECK(g.tensor.shape == std::vector<int64_t>{2, 3, 4});
  CHECK(g.tensor.payload == f.tensor.payload);
}

TEST_CASE("the header layout is little-endian as documented") {
  const std::string h = encodeFrameHeader(sampleFrame());
  CHECK(h.substr(0, 4) == "SKTF");
  CHECK(static_cast<unsigned char>(h[4]) == kFrameVersion);
  CHECK(static_cast<unsigned char>(h[6]) == 1);   // backward
  CHECK(static_cast<unsigned char>(h[16]) == 42);  // step
  CHECK(static_cast<unsigned char>(h[30]) == 3);   // ndim
}

TEST_CASE("every corrupted byte of a frame is refused, never crashes") {
  const TensorFrame f = sampleFrame();
  const std::string header = encodeFrameHeader(f);
  for (size_t i = 0; i < header.size(); ++i) {
    std::string bad = header;
    bad[i] = static_cast<char>(bad[i] ^ 0x40);
    CAPTURE(i);
    CHECK_THROWS_AS(decodeFrame(bad.data(), bad.size(), f.tensor.payload), skytrain::WireError);
  }
  std::string payload = f.tensor.payload;
  payload[17] ^= 1;
  CHECK_THROWS_WITH(decodeFrame(header.data(), header.size(), payload), Catch::Contains("checksum"));
}

TEST_CASE("truncated headers and payloads are refused") {
  const TensorFrame f = sampleFrame();
  const std::string header = encodeFrameHeader(f);
  for (size_t n = 0; n < header.size(); ++n) {
    CHECK_THROWS_AS(decodeFrame(header.data(), n, f.tensor.payload), skytrain::WireError);
  }
  CHECK_THROWS_WITH(decodeFrame(header.data(), header.size(), f.tensor.payload.substr(1)),
                    Catch::Contains("header says"));
}

TEST_CASE("a frame of another protocol version is refused by name") {
  std::string header = encodeFrameHeader(sampleFrame());
  header[4] = 9;
  CHECK_THROWS_WITH(decodeFrame(header.data(), header.size(), sampleFrame().tensor.payload),
                    Catch::Contains("version 9 is not supported"));
}

TEST_CASE("frames that cannot be described are refused at encode time") {
  TensorFrame f = sampleFrame();
  f.tensor.shape.assign(kMaxFrameDims + 1, 1);
  CHECK_THROWS_AS(encodeFrameHeader(f), skytrain::Error);
  f = sampleFrame();
  f.tensor.codec.clear();
  CHECK_THROWS_AS(encodeFrameHeader(f), skytrain::Error);
}
