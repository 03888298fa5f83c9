// The "torchscript" kind: one TorchScript file per stage (stages/models/torchscript/torchscript_stage.h
// loads each), cut by the user rather than by layer ranges.
#pragma once

#include <memory>

#include "stages/models/model_source.h"

namespace skytrain::stages {

std::unique_ptr<ModelSource> makeTorchScriptSource(const ModelConfig& config);

}  // namespace skytrain::stages
