// Weight export on a stage daemon: a hosted stage's parameters, with global names, as a
// safetensors file read in chunks by `skytrain export` — the final weights or those of a
// kept checkpoint. Only the job's owner (as named by its coordinator when the stage was
// prepared) or an admin may read them.
//
// Files, under <state_dir>/jobs/<job>/:
//   owner.json                           {"coordinator": key, "owner": key}, at the job's first prepare, never rewritten
//   stage-<i>.owner.json                 the same, for the stage (export reads it)
//   stage-<i>.safetensors                the final weights, at the job's end
//   export/step-<8 digits>-stage-<i>.safetensors   a checkpoint's parameters, made at the first read
#pragma once

#include <string>

#include "daemon/net/access.h"
#include "daemon/protocol/control.h"
#include "daemon/protocol/messages.h"

namespace skytrain::daemon {

// Claims the job for its coordinator and owner at its first prepare here (owner.json); later
// prepares must name both again. Ownership is what the first coordinator said, not what the
// latest request says: throws Refusal when the job is known with another coordinator or
// owner, or is not known and !mayCreate (a prepare without a proof of the job's id);
// skytrain::Error when the record cannot be written.
void claimJob(const std::string& jobRoot, const std::string& job, const std::string& coordinatorKey,
              const std::string& ownerKey, bool mayCreate);

// Records who prepared the stage and who owns its job. Throws skytrain::Error naming the path.
void recordStageOwner(const std::string& jobDir, int stage, const std::string& coordinatorKey,
                      const std::string& ownerKey);

std::string finalWeightsPath(const std::string& jobDir, int stage);

// Answers an export request: {"ok", "size", "offset", "data"}. Throws Refusal when the
// caller may not read the job's weights, skytrain::Error when the stage, step or file is
// not here (naming which).
protocol::Json readExportChunk(const std::string& stateDir, const protocol::ExportRead& request, const Caller& caller);

}  // namespace skytrain::daemon
