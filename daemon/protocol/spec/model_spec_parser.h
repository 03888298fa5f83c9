// The "model" object of a job spec and the init_from lists it shares with the stages, parsed
// for job_spec.cpp (the one parser of a job spec; this is its model part).
#pragma once

#include <string>
#include <vector>

#include "daemon/protocol/spec/job_spec.h"
#include "daemon/protocol/json_reader.h"

namespace skytrain::protocol {

// Throws skytrain::SpecError naming the JSON path and the bad value.
ModelSpec parseModelSpec(ObjectReader r);
// init_from: a file or an array of 1..256 files (safetensors, a skytrain checkpoint's, or a
// Hugging Face model directory).
std::vector<std::string> parseInitFrom(ObjectReader& r);

}  // namespace skytrain::protocol
