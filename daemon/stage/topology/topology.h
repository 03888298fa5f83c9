// Topology: how a job's stages are joined, as one stage sees it — a chain (chain.h: frames
// to the previous and next stage along the schedule) or a fan-in (fan_in.h: producers each
// with their own data and loss feeding one consumer token IDs, acknowledged step by step).
// It runs a step's forwards and backwards; the update policy decides when they reach the
// weights.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace skytrain::daemon {

class Topology {
 public:
  virtual ~Topology() = default;

  // A step's forwards and backwards on this stage, adding its losses to lossSum.
  virtual void runOps(uint64_t step, double& lossSum) = 0;
  // After the step's update (a fan-in consumer acknowledges the step to every producer).
  virtual void endStep(uint64_t step) {}
  // The losses a step's lossSum holds; 0 where this stage computes none.
  virtual int lossTerms() const = 0;
  // A fan-in producer: how many steps it ran ahead of the consumer this step; else -1.
  virtual int lead() const { return -1; }

  // A validation pass after `step`: the mean token loss where this stage computes it.
  virtual std::optional<double> evaluate(uint64_t step) = 0;
  // The last pass's metrics beyond the loss, by name.
  virtual std::map<std::string, double> evalMetrics() const { return {}; }
  // {"compute": ..., "link": ...}: what the planner is fitted to (profiler.h).
  virtual nlohmann::json profile(uint64_t step) = 0;
};

}  // namespace skytrain::daemon
