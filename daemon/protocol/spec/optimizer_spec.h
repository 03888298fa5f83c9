// The "optimizer" section of a job spec (daemon/protocol/spec/job_spec.h) and the precision it
// trains under: the section's parse, with its defaults where it is absent (loss scaling on
// under fp16), and the check of where fp16 and loss scaling may run, which needs the whole
// spec. Not public API.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "daemon/protocol/spec/job_spec.h"
#include "daemon/protocol/json_reader.h"

namespace skytrain::protocol {

// `section`: the spec's "optimizer" object, or null where the spec has none.
OptimizerSpec parseOptimizer(const nlohmann::json* section, int steps, const std::string& precision);
// Throws SpecError where fp16 has a copy off CUDA, or loss scaling meets the delayed update
// or a fan-in.
void checkPrecision(const JobSpec& spec);

}  // namespace skytrain::protocol
