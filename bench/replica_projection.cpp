// The planner's projection of data-parallel stage replicas at cluster scale: a two-stage
// model, one stage per cloud, R copies of each stage per cluster (2R accelerators), a fixed
// global batch. Each row is scheduler::makePlan's chosen step time for R pipelines of B/R
// samples sharing the link between clouds, plus each stage's ring all-reduce inside its
// cluster. The inputs are assumptions, printed with the table; none is measured here.
//
// Usage: replica_projection [link_gbit_per_s]...   (default: 1 10 100)
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "scheduler/planner.h"

using namespace skytrain::scheduler;

namespace {

// The article's setting, approximated: a 24-block, d_model 1024 transformer (~300M
// parameters) cut in two halves, 512-token sequences, a global batch of 1024 sequences.
constexpr double kParametersPerStage = 150e6;
constexpr double kTokens = 512, kDModel = 1024;
constexpr int kBatch = 1024;
constexpr double kAcceleratorFlops = 40e12;  // sustained, mixed precision
constexpr double kBytesPerActivation = 0.5;  // a ~8x codec pair on fp32 (int8 with a low-rank part)
constexpr double kIntraBytesPerSecond = 100e9 / 8;  // each copy's NIC inside the cluster
constexpr double kIntraLatency = 5e-6;
constexpr double kLinkDelay = 0.020;  // one way between the clouds

double ringAllReduceSeconds(int replicas, double bytes) {
  if (replicas < 2) return 0;
  return 2.0 * (replicas - 1) / replicas * bytes / kIntraBytesPerSecond + 2.0 * (replicas - 1) * kIntraLatency;
}

PlannerInput inputFor(int replicas, double linkBytesPerSecond) {
  PlannerInput in;
  in.replicas = replicas;
  in.batchSize = kBatch / replicas;
  const double flopsPerSample = 2 * kParametersPerStage * kTokens;  // forward; backward twice that
  StageProfile stage;
  stage.forwardSeconds = {1e-3, flopsPerSample / kAcceleratorFlops};
  stage.backwardSeconds = {1e-3, 2 * flopsPerSample / kAcceleratorFlops};
  stage.outputBytes = {64, kTokens * kDModel * kBytesPerActivation};
  stage.gradientBytes = stage.outputBytes;
  stage.allReduceSeconds = ringAllReduceSeconds(replicas, 4 * kParametersPerStage);  // fp32 gradients
  in.stages = {stage, stage};
  in.links = {{linkBytesPerSecond, kLinkDelay, 50e-6}};
  return in;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> links;
  for (int i = 1; i < argc; ++i) links.push_back(std::atof(argv[i]));
  if (links.empty()) links = {1, 10, 100};
  std::printf("assumed: 2 stages x %.0fM parameters, %d x %.0f-token batch, %.0f TFLOP/s per accelerator,\n"
              "  %.2f bytes per activation value, ring all-reduce at %.0f Gbit/s inside a cluster, %.0f ms one way "
              "between clouds\n",
              kParametersPerStage / 1e6, kBatch, kTokens, kAcceleratorFlops / 1e12, kBytesPerActivation,
              kIntraBytesPerSecond * 8 / 1e9, kLinkDelay * 1e3);
  for (double gbit : links) {
    std::printf("\nlink between clouds %.0f Gbit/s\n", gbit);
    std::printf("  replicas  accelerators  samples/pipeline   m  schedule     all-reduce (s)  step (s)  speed-up vs 8  efficiency\n");
    double base = makePlan(inputFor(8, gbit * 1e9 / 8)).chosen.stepSeconds;
    for (int replicas : {4, 8, 16, 32, 64}) {
      const Plan plan = makePlan(inputFor(replicas, gbit * 1e9 / 8));
      const PlanRow& row = plan.chosen;
      const double speedup = base / row.stepSeconds;
      std::printf("  %8d  %12d  %16d  %3d  %-11s  %14.3f  %8.3f  %13.2f  %10.2f\n", replicas, 2 * replicas,
                  kBatch / replicas, row.microBatches, toString(row.schedule).c_str(), row.allReduceSeconds,
                  row.stepSeconds, speedup, speedup / (replicas / 8.0));
    }
  }
  return 0;
}
