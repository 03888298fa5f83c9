// The prefixes of a stage's failure message that the coordinator's retry decision reads:
// the contract between a stage's failure report and whether a restart may help.
#pragma once

namespace skytrain::protocol {

// Starts a stage's failure message when a loss or gradient is NaN or Inf: the job fails
// (a restart would meet it again).
constexpr const char* kNonFinite = "non-finite: ";
// Starts a stage's failure message when its model cannot be built (a bad TorchScript
// module, a wrong shape): the job fails, for a restart would meet it again.
constexpr const char* kBadModel = "bad model: ";
// Starts a stage's failure message when its data is wrong for the job (a token id past the
// vocabulary, a corpus too small for a window: the data libraries' "data: " errors) or the
// spec is refused where only the stage can check it (vocab_size against the tokenizer): the
// job fails, for a restart would meet it again.
constexpr const char* kBadData = "bad data: ";
constexpr const char* kBadSpec = "bad spec: ";
// Starts a stage's failure message when its checkpoint could not be restored: the
// coordinator then falls back to the checkpoint before.
constexpr const char* kBadCheckpoint = "bad checkpoint: ";

}  // namespace skytrain::protocol
