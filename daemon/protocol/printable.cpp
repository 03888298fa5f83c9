#include "daemon/protocol/printable.h"

#include <cstdint>
#include <cstdio>

namespace skytrain::protocol {
namespace {

void appendByte(std::string& out, unsigned char byte) {
  char escaped[5];
  std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
  out += escaped;
}

// The length of the UTF-8 sequence starting at text[i] and its code point; 0 when the
// bytes there are not one (a stray continuation, a truncated or overlong sequence).
size_t decode(std::string_view text, size_t i, uint32_t& code) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char lead = b(0);
  size_t length = 0;
  uint32_t minimum = 0;
  if (lead < 0x80) return code = lead, 1;
  if ((lead & 0xe0) == 0xc0) length = 2, code = lead & 0x1f, minimum = 0x80;
  else if ((lead & 0xf0) == 0xe0) length = 3, code = lead & 0x0f, minimum = 0x800;
  else if ((lead & 0xf8) == 0xf0) length = 4, code = lead & 0x07, minimum = 0x10000;
  else return 0;
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    code = (code << 6) | (b(k) & 0x3f);
  }
  if (code < minimum || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return length;
}

bool reorders(uint32_t code) { return (code >= 0x202a && code <= 0x202e) || (code >= 0x2066 && code <= 0x2069); }

}  // namespace

std::string printable(std::string_view text, size_t maxBytes) {
  const bool cut = text.size() > maxBytes;
  if (cut) text = text.substr(0, maxBytes);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t code = 0;
    const size_t length = decode(text, i, code);
    if (length == 0) {
      appendByte(out, static_cast<unsigned char>(text[i++]));
      continue;
    }
    if (code < 0x20 || code == 0x7f || (code >= 0x80 && code < 0xa0)) {
      appendByte(out, static_cast<unsigned char>(code));
    } else if (reorders(code)) {
      char escaped[12];
      std::snprintf(escaped, sizeof escaped, "\\u{%04x}", static_cast<unsigned>(code));
      out += escaped;
    } else if (code == '\\') {
      out += "\\\\";
    } else {
      out.append(text.substr(i, length));
    }
    i += length;
  }
  if (cut) out += "...";
  return out;
}

}  // namespace skytrain::protocol
