#include "daemon/coordinator/planning.h"

#include "daemon/protocol/failures.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

using Json = nlohmann::json;

scheduler::LinearFit fit(const Json& points) {
  std::vector<std::pair<double, double>> xy;
  for (const auto& p : points) xy.emplace_back(p.at(0).get<double>(), p.at(1).get<double>());
  return scheduler::fitLinear(xy);
}

Json toJson(const scheduler::LinearFit& f) { return {{"a", f.a}, {"k", f.k}}; }

}  // namespace

scheduler::PlannerInput plannerInput(const protocol::JobSpec& spec, const std::vector<Json>& profiles) {
  scheduler::PlannerInput input;
  input.replicas = protocol::replicaCount(spec);
  input.batchSize = spec.batchSize / input.replicas;  // each pipeline's share
  if (spec.microBatches > 0) input.microBatches = spec.microBatches;
  if (spec.schedule != "auto") input.schedules = {*scheduler::parseScheduleKind(spec.schedule)};
  input.delayedUpdate = spec.update == "delayed";
  try {
    double budget = 0;
    for (size_t s = 0; s < profiles.size(); ++s) {
      const Json& compute = profiles[s].at("compute");
      scheduler::StageProfile stage;
      stage.forwardSeconds = fit(compute.at("forward_s"));
      stage.backwardSeconds = fit(compute.at("backward_s"));
      if (compute.contains("weight_s")) stage.weightSeconds = fit(compute.at("weight_s"));
      stage.outputBytes = fit(compute.at("output_bytes"));
      stage.gradientBytes = fit(compute.at("gradient_bytes"));
      stage.stashBytesPerSample = compute.at("stash_bytes_per_sample").get<double>();
      stage.allReduceSeconds = compute.value("allreduce_s", 0.0);
      const double stageBudget = compute.at("memory_budget_bytes").get<double>();
      if (stageBudget > 0) budget = budget > 0 ? std::min(budget, stageBudget) : stageBudget;
      input.stages.push_back(stage);
      if (s + 1 < profiles.size()) {
        const Json& link = profiles[s].at("link");
        input.links.push_back({link.at("bandwidth_bytes_per_s").get<double>(), link.at("delay_s").get<double>(),
                               link.at("overhead_s").get<double>()});
      }
    }
    input.memoryBudgetBytes = budget;
    // A subspace model: every stage must hold the frame the others hold, or one stage's
    // coefficients mean another thing to the next (a conversion's eigensolver on another
    // CPU or LAPACK could round differently).
    const std::string first = profiles.empty() ? std::string() : profiles[0].at("compute").value("frame", std::string());
    for (size_t s = 1; s < profiles.size(); ++s) {
      const std::string mine = profiles[s].at("compute").value("frame", std::string());
      if (mine != first) {
        throw Error(std::string(protocol::kBadModel) + "stages 0 and " + std::to_string(s) +
                    " hold different subspace frames (hash " + first.substr(0, 16) + " against " + mine.substr(0, 16) +
                    "): their CPUs or libraries computed the frame differently; run the stages on one kind of "
                    "machine, or convert the model once and give every stage the converted export");
      }
    }
    // Tied matrices: a first holder's bytes cross every link up to the second holder.
    input.tiedBytes.assign(input.links.size(), 0.0);
    for (size_t s = 0; s < profiles.size(); ++s) {
      for (const Json& tied : profiles[s].at("compute").value("tied", Json::array())) {
        const double bytes = tied.at("bytes").get<double>();
        const int to = tied.at("to_stage").get<int>();
        if (!(bytes >= 0 && bytes < 1e15) || to <= static_cast<int>(s) || to >= static_cast<int>(profiles.size())) {
          throw WireError("malformed stage profile: stage " + std::to_string(s) + " reports a tied matrix of " +
                          std::to_string(bytes) + " bytes to stage " + std::to_string(to));
        }
        for (int k = static_cast<int>(s); k < to; ++k) input.tiedBytes[k] += bytes;
      }
    }
    // "auto" directions: each link's options as the stage that encodes them timed them, in
    // the spec's order of preference.
    const bool autoForward = spec.compression.forward == "auto", autoBackward = spec.compression.backward == "auto";
    auto options = [&](const Json& profile, const char* direction) {
      std::vector<scheduler::CodecOption> out;
      const Json& timed = profile.at("compute").at("codecs").at(direction);
      for (const auto& name : spec.compression.allowedFor(std::string(direction) == "forward")) {
        const Json& o = timed.at(name);
        out.push_back({name, fit(o.at("seconds")), fit(o.at("bytes"))});
      }
      return out;
    };
    for (size_t s = 0; s + 1 < profiles.size() && (autoForward || autoBackward); ++s) {
      input.forwardCodecs.push_back(autoForward ? options(profiles[s], "forward") : std::vector<scheduler::CodecOption>{});
      input.backwardCodecs.push_back(autoBackward ? options(profiles[s + 1], "backward")
                                                  : std::vector<scheduler::CodecOption>{});
    }
  } catch (const Json::exception& e) {
    throw WireError(std::string("malformed stage profile: ") + e.what());
  }
  return input;
}

std::vector<double> measuredCalibration(const scheduler::PlannerInput& input, int microBatches,
                                        const std::vector<Json>& rows) {
  const double b = static_cast<double>(input.batchSize) / microBatches;
  std::vector<double> factors;
  for (size_t s = 0; s < input.stages.size(); ++s) {
    double measured = 0;
    for (const auto& row : rows) measured += row.at("compute_s").at(s).get<double>();
    const double predicted =
        microBatches * (input.stages[s].forwardSeconds.at(b) + input.stages[s].backwardSeconds.at(b));
    factors.push_back(rows.empty() ? 0.0 : (measured / rows.size() - predicted) / microBatches);
  }
  return factors;
}

void calibrate(scheduler::PlannerInput& input, const std::vector<double>& secondsPerMicroBatch) {
  for (size_t s = 0; s < input.stages.size() && s < secondsPerMicroBatch.size(); ++s) {
    auto& stage = input.stages[s];
    const double b = input.batchSize;  // split in proportion at the full batch
    const double f = std::max(1e-12, stage.forwardSeconds.at(b)), w = std::max(1e-12, stage.backwardSeconds.at(b));
    stage.forwardSeconds.a = std::max(0.0, stage.forwardSeconds.a + secondsPerMicroBatch[s] * f / (f + w));
    stage.backwardSeconds.a = std::max(0.0, stage.backwardSeconds.a + secondsPerMicroBatch[s] * w / (f + w));
  }
}

Json toJson(const scheduler::PlanRow& row) {
  return {{"micro_batches", row.microBatches},
          {"schedule", scheduler::toString(row.schedule)},
          {"warmups", row.warmups},
          {"step_s", row.stepSeconds},
          {"bubble", row.bubbleRatio},
          {"bytes_per_step", row.bytesPerStep},
          {"allreduce_s", row.allReduceSeconds},
          {"tied_s", row.tiedSeconds},
          {"forward_codecs", row.forwardCodecs},
          {"backward_codecs", row.backwardCodecs},
          {"stash_bytes", row.stashBytes},
          {"fits", row.fits}};
}

Json toJson(const scheduler::Plan& plan, const scheduler::PlannerInput& input) {
  Json out = toJson(plan.chosen);
  out["table"] = Json::array();
  for (const auto& row : plan.table) out["table"].push_back(toJson(row));
  out["stages"] = Json::array();
  for (const auto& s : input.stages) {
    out["stages"].push_back({{"forward_s", toJson(s.forwardSeconds)},
                             {"backward_s", toJson(s.backwardSeconds)},
                             {"weight_s", toJson(s.weightSeconds)},
                             {"output_bytes", toJson(s.outputBytes)},
                             {"gradient_bytes", toJson(s.gradientBytes)},
                             {"allreduce_s", s.allReduceSeconds}});
  }
  out["links"] = Json::array();
  for (const auto& l : input.links) {
    out["links"].push_back({{"bandwidth_bytes_per_s", l.bandwidthBytesPerSecond},
                            {"delay_s", l.delaySeconds},
                            {"overhead_s", l.overheadSeconds}});
  }
  out["memory_budget_bytes"] = input.memoryBudgetBytes;
  out["replicas"] = input.replicas;
  out["batch_per_replica"] = input.batchSize;
  out["update"] = input.delayedUpdate ? "delayed" : "sync";
  return out;
}

void describeStages(Json& plan, const std::vector<Json>& profiles) {
  for (size_t s = 0; s < profiles.size() && s < plan["stages"].size(); ++s) {
    const Json* compute = profiles[s].is_object() && profiles[s].contains("compute") ? &profiles[s]["compute"] : nullptr;
    if (!compute || !compute->is_object()) continue;
    const auto parameters = compute->find("parameters");
    if (parameters != compute->end() && parameters->is_object() && parameters->value("trainable", Json()).is_number_integer() &&
        parameters->value("frozen", Json()).is_number_integer()) {
      plan["stages"][s]["parameters"] = {{"trainable", (*parameters)["trainable"]}, {"frozen", (*parameters)["frozen"]}};
    }
    const auto seconds = compute->find("profile_s");
    if (seconds != compute->end() && seconds->is_number() && compute->value("profile_passes", Json()).is_string()) {
      const std::string passes = (*compute)["profile_passes"];
      plan["stages"][s]["profile"] = {{"seconds", *seconds}, {"passes", passes == "lean" ? "lean" : "full"}};
    }
    const auto init = compute->find("init_from");
    if (init != compute->end() && init->is_array() && !init->empty() && init->size() <= 256) {
      plan["stages"][s]["init_from"] = *init;
    }
  }
}

}  // namespace skytrain::daemon
