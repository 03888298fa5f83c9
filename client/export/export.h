// `skytrain export` and `skytrain plot`: commands that gather a job's data (weights from
// each stage daemon, curves from the coordinator) into one local file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "client/commands.h"
#include "client/plot.h"

namespace skytrain::client {

// Writes the job's weights — final (step -1) or from the complete checkpoint after `step` —
// merged from every stage daemon into one safetensors file with global names.
// Throws skytrain::Error unless `path` is new or a regular file: `export -o` and `plot -o`
// replace what they write by renaming over it, which must never hit a device, a socket or
// a directory (run as root, a rename replaces a device node).
void checkOutputPath(const std::string& path);

struct ExportOptions {
  int64_t step = -1;                    // a complete checkpoint's step; -1: the final weights
  std::string format = "safetensors";  // or "hf": a Hugging Face model directory (client/export/hf_export.h)
  uint64_t shardBytes = 5'000'000'000;  // hf: the largest shard
};
int exportWeights(const ClientOptions& options, const std::string& job, const std::string& out,
                  const ExportOptions& exportOptions);

// Writes the jobs' curves as one SVG.
int plot(const ClientOptions& options, const std::vector<std::string>& jobs, const std::string& out,
         const PlotOptions& plotOptions);

// Measures the link to the daemon at options.daemon through its data port.
int probe(const ClientOptions& options, size_t bigBytes);

}  // namespace skytrain::client
