// A stage's starting weights from the spec's init_from entries (model.init_from, then the
// stage's own): a safetensors file or a skytrain checkpoint's, matched by name; or a Hugging
// Face model directory, checked against the spec (config.json) and read tensor by tensor
// through the kind's layout (daemon/protocol/spec/hf_layout.h), so the stage reads its own
// layers' tensors only.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "daemon/protocol/spec/job_spec.h"
#include "stages/stage.h"

namespace skytrain::daemon {

constexpr size_t kMaxInitBytes = size_t{1} << 40;  // one init_from file

// Loads every entry into `stage` and returns one report per entry: {"file", "loaded",
// "from_seed"}, and for a Hugging Face directory "format": "hf", "bytes_read", "bytes_total",
// "files". `namePrefix`: the model source's (ModelSource::namePrefix). Throws skytrain::Error
// naming the entry and every mismatch.
nlohmann::json loadInitialWeights(stages::Stage& stage, const protocol::JobSpec& spec, int stageIndex,
                                  const std::string& namePrefix);

}  // namespace skytrain::daemon
