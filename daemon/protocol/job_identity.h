// A job's id says which daemon coordinates it: the first 8 bytes of BLAKE2b over the
// coordinator's public key and a random proof, as 16 hex digits. The coordinator sends the
// proof with every stage.prepare; a stage daemon recomputes the id from the key that
// authenticated the request, so no other daemon — authorised or not — can prepare, claim or
// collide with a job it did not make (finding another key and proof for a given id is a
// 64-bit preimage of BLAKE2b).
#pragma once

#include <string>

namespace skytrain::protocol {

constexpr size_t kJobProofHexDigits = 32;

struct JobIdentity {
  std::string id;     // 16 lowercase hex digits
  std::string proof;  // kJobProofHexDigits lowercase hex digits
};

// A fresh identity for a job coordinated by the daemon with this public key ("" when
// insecure).
JobIdentity newJobIdentity(const std::string& coordinatorKey);

// The id that `proof` gives under `coordinatorKey`. Throws skytrain::WireError when the
// proof is not kJobProofHexDigits lowercase hex digits.
std::string jobIdFor(const std::string& coordinatorKey, const std::string& proof);

}  // namespace skytrain::protocol
