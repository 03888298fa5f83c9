// Merging safetensors files without Torch (`skytrain export`): each stage daemon sends its
// stage's parameters as one file; the CLI joins them into one with every tensor under its
// global name. The format's layout is in stages/safetensors.h. Every header passes the same
// check as the daemon's reader (compression/safetensors_header.h) before anything is
// copied, because the bytes came over a socket.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace skytrain::client {

// Writes `out` from `inputs` (tensors in input order), with `metadata`; refuses a name
// that two inputs share. Atomic: written to out.tmp and renamed. Returns the tensor count.
//
// `tied`: pairs {first, copy} of one matrix two stages each hold (protocol::tiedCopies).
// Where both are present, the copy is written once, as `first`, and the metadata's
// "skytrain_tied" lists "copy=first" (comma-separated); two copies that differ in dtype,
// shape or any byte are refused, naming both.
size_t mergeSafetensors(const std::vector<std::string>& inputs, const std::string& out,
                        const std::map<std::string, std::string>& metadata,
                        const std::vector<std::pair<std::string, std::string>>& tied = {});

}  // namespace skytrain::client
