// `skytrain export --format hf`: a job's merged weights (global skytrain names) written as a
// Hugging Face model directory — config.json, model.safetensors or shards
// model-0000k-of-0000n.safetensors with model.safetensors.index.json — in the layout
// transformers' from_pretrained loads. Names and transposes come from the family's table
// (daemon/protocol/spec/hf_layout.h); a tied head is written once, as the embedding. No Torch.
#pragma once

#include <cstdint>
#include <string>

#include "daemon/protocol/spec/job_spec.h"

namespace skytrain::client {

constexpr uint64_t kDefaultShardBytes = 5'000'000'000;  // transformers' default max_shard_size, "5GB"

// Parses "5GB", "500MB", "2GiB", "123" (bytes). Throws skytrain::Error naming the text.
uint64_t parseByteSize(const std::string& text);

// What was written.
struct HfExport {
  size_t tensors = 0;
  size_t shards = 0;
  uint64_t bytes = 0;
};

// Converts `merged` (a safetensors file of the whole model, skytrain names) into the new
// directory `dir` (created; refused when it exists and is not empty). Throws skytrain::Error
// naming what is wrong: a kind without a Hugging Face layout, a tensor the layout lacks.
HfExport writeHfDirectory(const protocol::ModelSpec& model, const std::string& merged, const std::string& dir,
                          uint64_t shardBytes);

}  // namespace skytrain::client
