// Base64 (RFC 4648, with padding) for binary data inside JSON control messages: the chunks
// of `skytrain export`.
#pragma once

#include <string>

namespace skytrain::protocol {

std::string base64Encode(const std::string& bytes);
// Throws skytrain::WireError on a character outside the alphabet, bad padding (or non-zero
// bits under it: only the canonical text is accepted), or a text longer than
// maxDecodedBytes would need.
std::string base64Decode(const std::string& text, size_t maxDecodedBytes);

}  // namespace skytrain::protocol
