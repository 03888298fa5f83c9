// The wire form of a stage report (StageReport, messages.h): what follows its job and stage,
// read with every value bounded and written back. messages.cpp reads and writes the rest.
#pragma once

#include <nlohmann/json.hpp>

#include "daemon/protocol/json_reader.h"
#include "daemon/protocol/messages.h"

namespace skytrain::protocol {

// Reads the report's own fields into `m` (its job, stage and replica already read). Throws
// SpecError naming the field: an unknown kind, a value out of range, an eval without a loss,
// a code share of a layer not written plainly.
void readReportFields(ObjectReader& r, StageReport& m);
// The fields readReportFields reads, for the kind `m` is.
nlohmann::json reportFields(const StageReport& m);

}  // namespace skytrain::protocol
