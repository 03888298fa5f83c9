// TorchScript stages: the user's own model, exported from Python (torch.jit.script or
// torch.jit.trace, then .save), one file per stage, whose forward is that stage.
#pragma once

#include <memory>
#include <string>

#include "stages/stage.h"

namespace skytrain::stages {

// Loads `file`. With moduleLoss the module must also have loss(output, targets) -> Tensor,
// which then is the stage's loss. Throws skytrain::Error naming the file and the reason
// (unreadable, not TorchScript, no forward, no loss).
std::unique_ptr<Stage> loadTorchScriptStage(const std::string& file, bool moduleLoss);

// The first line of an exception's message (LibTorch's carry a C++ backtrace).
std::string firstLineOf(const std::exception& e);

}  // namespace skytrain::stages
