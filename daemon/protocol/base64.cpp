#include "daemon/protocol/base64.h"

#include <array>
#include <cstdint>

#include "scheduler/error.h"

namespace skytrain::protocol {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::array<int8_t, 256> decodeTable() {
  std::array<int8_t, 256> table{};
  table.fill(-1);
  for (int i = 0; i < 64; ++i) table[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}

}  // namespace

std::string base64Encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out.push_back(k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=');
  }
  return out;
}

std::string base64Decode(const std::string& text, size_t maxDecodedBytes) {
  static const auto table = decodeTable();
  if (text.size() % 4 != 0) throw WireError("base64 text of " + std::to_string(text.size()) + " characters is not a multiple of 4");
  if (text.size() / 4 * 3 > maxDecodedBytes + 2) {
    throw WireError("base64 text of " + std::to_string(text.size()) + " characters is over the limit of " +
                    std::to_string(maxDecodedBytes) + " bytes");
  }
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t v = 0;
    int padding = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      const bool last = i + 4 == text.size();
      if (c == '=' && last && k >= 2 && (k == 3 || text[i + 3] == '=')) {
        ++padding;
        v <<= 6;
        continue;
      }
      const int8_t d = table[static_cast<unsigned char>(c)];
      if (d < 0 || padding > 0) throw WireError("base64 text has a bad character at " + std::to_string(i + k));
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    // The bits padding discards must be zero: one text per byte string (RFC 4648, 3.5).
    if ((padding == 1 && (v & 0xff) != 0) || (padding == 2 && (v & 0xffff) != 0)) {
      throw WireError("base64 text has non-zero bits under its padding");
    }
    for (int k = 0; k < 3 - padding; ++k) out.push_back(static_cast<char>((v >> (16 - 8 * k)) & 0xff));
  }
  return out;
}

}  // namespace skytrain::protocol
