// The "compression" section of a job spec (daemon/protocol/spec/job_spec.h): its parse, and the
// check of where a codec that needs token IDs ("+pred") may stand, which needs the whole spec.
#pragma once

#include "daemon/protocol/spec/job_spec.h"
#include "daemon/protocol/json_reader.h"

namespace skytrain::protocol {

CompressionSpec parseCompression(ObjectReader r);
// Throws SpecError unless every "+pred" codec is the forward codec of a 2-stage job of token IDs.
void checkPredictive(const JobSpec& spec);

}  // namespace skytrain::protocol
