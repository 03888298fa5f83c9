// What a terminal or a text log line may show of a string that came from a peer or a spec
// (a job name, a stage's error, an event): the string itself, with every byte that could
// start a new line, move the cursor, recolour or reorder text escaped. Shared by the daemon's
// text logs and the CLI; JSON output encodes such strings itself.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace skytrain::protocol {

// Escapes C0 controls (newline and tab included), DEL and C1 controls as \xNN, Unicode's
// bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069) as
// \u{XXXX}, bytes that are not UTF-8 as \xNN, and a backslash as \\; everything else stays.
// Past maxBytes of input the rest is cut and "..." ends the result. Never throws but for
// std::bad_alloc.
std::string printable(std::string_view text, size_t maxBytes = 4096);

}  // namespace skytrain::protocol
