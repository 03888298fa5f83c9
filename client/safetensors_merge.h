// Merging safetensors files without Torch (`skytrain export`): each stage daemon sends its
// stage's parameters as one file; the CLI joins them into one with every tensor under its
// global name. The format's layout is in stages/safetensors.h. Every header passes the same
// check as the daemon's reader (compression/safetensors_header.h) before anything is
// copied, because the bytes came over a socket.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace skytrain::client {

// Writes `out` from `inputs` (tensors in input order), with `metadata`; refuses a name
// that two inputs share. Atomic: written to out.tmp and renamed. Returns the tensor count.
size_t mergeSafetensors(const std::vector<std::string>& inputs, const std::string& out,
                        const std::map<std::string, std::string>& metadata);

}  // namespace skytrain::client
