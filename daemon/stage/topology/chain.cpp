#include "daemon/stage/topology/chain.h"

#include "daemon/stage/topology/evaluation.h"
#include "daemon/stage/runner/profiler.h"
#include "daemon/stage/runner/schedule_executor.h"
#include "daemon/stage/runner/stage_context.h"

namespace skytrain::daemon {

Chain::Chain(const StageContext& context, ScheduleExecutor& executor, stages::Stage& model, Evaluation& evaluation,
             Profiler& profiler)
    : context_(context), executor_(executor), model_(model), evaluation_(evaluation), profiler_(profiler) {}

void Chain::runOps(uint64_t step, double& lossSum) { executor_.runStep(step, model_, lossSum); }

int Chain::lossTerms() const { return context_.isLast() ? executor_.schedule().microBatches : 0; }

std::optional<double> Chain::evaluate(uint64_t step) { return evaluation_.run(step); }

std::map<std::string, double> Chain::evalMetrics() const { return evaluation_.metrics(); }

nlohmann::json Chain::profile(uint64_t step) { return profiler_.profile(step); }

}  // namespace skytrain::daemon
