// What the job spec tests share: a valid spec to edit, and the refusal an edited one gets.
#pragma once

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <utility>

#include "daemon/protocol/spec/job_spec.h"
#include "scheduler/error.h"

namespace skytrain::testing {

inline nlohmann::json validSpec() {
  return nlohmann::json::parse(R"({
    "name": "t", "seed": 3, "steps": 10, "batch_size": 8, "micro_batches": 4, "schedule": "gpipe",
    "model": {"d_model": 32, "heads": 4, "layers": 4, "d_ff": 64, "seq_len": 16},
    "data": {"files": ["/tmp/x.txt"]},
    "stages": [{"daemon": "tcp://127.0.0.1:7100", "layers": [0, 2]},
               {"daemon": "tcp://127.0.0.1:7110", "layers": [2, 4]}]
  })");
}

// The SpecError raised by a spec, as {path, message}.
inline std::pair<std::string, std::string> refusal(const nlohmann::json& spec) {
  try {
    protocol::parseJobSpec(spec.dump());
  } catch (const skytrain::SpecError& e) {
    return {e.path(), e.what()};
  }
  FAIL("spec was accepted: " << spec.dump());
  return {};
}

}  // namespace skytrain::testing
