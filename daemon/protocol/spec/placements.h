// Stage placements in a job spec: where each copy of a stage runs (daemon, key, device) and
// which layers each stage holds, parsed and checked for job_spec.cpp. Not public API.
#pragma once

#include <string>
#include <vector>

#include "daemon/protocol/spec/job_spec.h"
#include "daemon/protocol/json_reader.h"

namespace skytrain::protocol {

// A stage's or a copy's endpoint: tcp:// or ipc://, and a Z85 key if one is given.
// Throws SpecError naming path.daemon or path.key.
void checkEndpoint(const std::string& daemon, const std::string& key, const std::string& path);

// "cpu", "cuda" or "cuda:N" (N < 64), default "cpu". Whether the daemon has it is checked there.
std::string parseDevice(ObjectReader& r);

// stages[i].replicas: the stage's further copies, each {daemon, key, device}.
std::vector<Placement> parseReplicas(ObjectReader& r);

// Every stage has the same number of copies, which divides the batch (and the fixed
// micro-batch count's share).
void checkReplicas(const JobSpec& spec);

// Zoo models: the stages' layer ranges tile [0, modelLayers) in order, each starting where
// the previous ended. Throws SpecError naming the overlap, the gap or the missing end.
void checkTiling(const std::vector<StageSpec>& stages, int modelLayers);

}  // namespace skytrain::protocol
