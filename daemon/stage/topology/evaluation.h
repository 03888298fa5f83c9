// Evaluation: a chain's validation pass — each stage's inference on the validation samples,
// the last stage's mean token loss and the objective's metrics (a classifier's accuracy, a
// translation's BLEU), with validation's own codec stream so training's state is untouched.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace skytrain::stages {
class DataSource;
class Objective;
class Stage;
}  // namespace skytrain::stages

namespace skytrain::daemon {

class CodecSet;
class ScheduleExecutor;
class StageLinks;
struct StageContext;

class Evaluation {
 public:
  // `data` is null on a stage that reads no data.
  Evaluation(const StageContext& context, StageLinks& links, CodecSet& codecs, ScheduleExecutor& executor,
             stages::Stage& model, const stages::DataSource* data, stages::Objective& objective);

  // The pass after `step`: the mean token loss on the last stage, else nullopt.
  std::optional<double> run(uint64_t step);
  // The last pass's metrics beyond the loss, by name (the last stage; else empty).
  const std::map<std::string, double>& metrics() const { return metrics_; }

 private:
  const StageContext& context_;
  StageLinks& links_;
  CodecSet& codecs_;
  ScheduleExecutor& executor_;
  stages::Stage& model_;
  const stages::DataSource* data_;
  stages::Objective& objective_;
  std::map<std::string, double> metrics_;
};

}  // namespace skytrain::daemon
