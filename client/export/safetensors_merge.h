// Merging safetensors files without Torch (`skytrain export`): each stage daemon sends its
// stage's parameters as one file; the CLI joins them into one with every tensor under its
// global name. The format's layout is in stages/weights/safetensors.h. Every header passes the same
// check as the daemon's reader (compression/wire/safetensors_header.h) before anything is
// copied, because the bytes came over a socket.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace skytrain::client {

struct MergedFile {
  size_t tensors = 0;                  // written
  std::vector<std::string> keptApart;  // tied copies written as themselves: they differ
};

// Writes `out` from `inputs` (tensors in input order), with `metadata`; refuses a name
// that two inputs share. Atomic: written to out.tmp and renamed.
//
// `tied`: pairs {first, copy} of one matrix two stages each hold (protocol::tiedCopies).
// Where both are present and equal (dtype, shape and every byte), the copy is written once,
// as `first`, and the metadata's "skytrain_tied" lists "copy=first" (comma-separated). Two
// that differ stay two tensors, named in keptApart: a copy frozen by model.trainable while
// the other trains (gradient_pipeline.h) is such a pair, and so is one a stage sent wrong.
MergedFile mergeSafetensors(const std::vector<std::string>& inputs, const std::string& out,
                            const std::map<std::string, std::string>& metadata,
                            const std::vector<std::pair<std::string, std::string>>& tied = {});

}  // namespace skytrain::client
