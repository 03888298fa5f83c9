// A job spec's model and data, as the stages module takes them: the model source's config
// and the data source a stage reads (text, a generator's own text, or labelled text).
#pragma once

#include <memory>

#include "daemon/protocol/job_spec.h"
#include "stages/gpt.h"
#include "stages/model_source.h"
#include "stages/text_data.h"

namespace skytrain::daemon {

// The model zoo's config for a job's model spec.
stages::GptConfig gptConfig(const protocol::ModelSpec& model);
// The model source's config: the kind, the sizes, the loss and each stage's part.
stages::ModelConfig modelConfig(const protocol::JobSpec& spec);
// What stage `stage` reads; throws skytrain::Error naming a file that cannot be read.
std::unique_ptr<stages::DataSource> makeDataSource(const protocol::JobSpec& spec, int stage);

}  // namespace skytrain::daemon
