#include "daemon/protocol/job_identity.h"

#include <sodium.h>

#include <cstdio>

#include "scheduler/error.h"

namespace skytrain::protocol {
namespace {

std::string hex(const unsigned char* bytes, size_t size) {
  std::string out(2 * size, '\0');
  for (size_t i = 0; i < size; ++i) std::snprintf(&out[2 * i], 3, "%02x", bytes[i]);
  return out;
}

void initialiseSodium() {
  if (sodium_init() < 0) throw Error("libsodium could not be initialised");
}

}  // namespace

std::string jobIdFor(const std::string& coordinatorKey, const std::string& proof) {
  if (proof.size() != kJobProofHexDigits || proof.find_first_not_of("0123456789abcdef") != std::string::npos) {
    throw WireError("a job's proof is " + std::to_string(kJobProofHexDigits) + " lowercase hex digits");
  }
  initialiseSodium();
  // The key's length first, so no (key, proof) pair reads as another.
  const std::string message = std::to_string(coordinatorKey.size()) + ":" + coordinatorKey + proof;
  unsigned char digest[8];
  crypto_generichash(digest, sizeof digest, reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                     nullptr, 0);
  return hex(digest, sizeof digest);
}

JobIdentity newJobIdentity(const std::string& coordinatorKey) {
  initialiseSodium();
  unsigned char nonce[kJobProofHexDigits / 2];
  randombytes_buf(nonce, sizeof nonce);
  JobIdentity out;
  out.proof = hex(nonce, sizeof nonce);
  out.id = jobIdFor(coordinatorKey, out.proof);
  return out;
}

}  // namespace skytrain::protocol
