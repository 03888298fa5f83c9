// parseJobSpec (daemon/protocol/spec/job_spec.h) on any bytes: a spec is parsed or refused with
// skytrain::Error, and a parsed spec keeps the promises the parser documents.
#include <cstddef>
#include <cstdint>
#include <string>

#include "daemon/protocol/spec/job_spec.h"
#include "scheduler/error.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using skytrain::protocol::JobSpec;

void checkSpec(const JobSpec& spec) {
  FUZZ_REQUIRE(!spec.name.empty() && spec.name.size() <= 128, spec.name);
  FUZZ_REQUIRE(spec.microBatches == 0 || spec.batchSize % spec.microBatches == 0, std::to_string(spec.microBatches));
  FUZZ_REQUIRE(spec.model.dModel % spec.model.heads == 0, std::to_string(spec.model.heads));
  FUZZ_REQUIRE(!spec.stages.empty() && spec.stages.size() <= 64, std::to_string(spec.stages.size()));
  const std::string& kind = spec.model.kind;
  if (kind == "gpt" || kind == "encoder" || kind == "classifier") {
    // The stages tile [0, model.layers) in order.
    int expected = 0;
    for (const auto& stage : spec.stages) {
      FUZZ_REQUIRE(stage.firstLayer == expected && stage.lastLayer > stage.firstLayer, std::to_string(stage.firstLayer));
      expected = stage.lastLayer;
    }
    FUZZ_REQUIRE(expected == spec.model.layers, std::to_string(expected));
  } else if (kind == "torchscript") {
    for (size_t i = 0; i < spec.stages.size(); ++i) {  // a module each; an input shape after the first
      FUZZ_REQUIRE(!spec.stages[i].module.empty() && (i == 0) == spec.stages[i].inputShape.empty(), std::to_string(i));
      int64_t elements = 1;
      for (int64_t d : spec.stages[i].inputShape) elements *= d;
      FUZZ_REQUIRE(elements >= 1 && elements <= skytrain::protocol::kMaxSampleElements, std::to_string(elements));
    }
  } else if (kind == "translation") {
    FUZZ_REQUIRE(spec.stages.size() == 2 && spec.model.decoderLayers >= 1, std::to_string(spec.stages.size()));
    for (const auto& stage : spec.stages) FUZZ_REQUIRE(stage.initFrom.size() <= 256, "init_from");
  } else {
    FUZZ_REQUIRE(kind == "electra" && spec.stages.size() >= 2 && spec.stages.back().dataFiles.empty(), kind);
    FUZZ_REQUIRE(spec.compression.forward == "tokens" || spec.compression.forward == "tokens+zstd", spec.compression.forward);
  }
  FUZZ_REQUIRE(kind != "classifier" || spec.model.classes.size() >= 2, "a classifier without classes");
  FUZZ_REQUIRE(!spec.data.files.empty(), "no data files");
  FUZZ_REQUIRE(spec.model.adapter >= 0, std::to_string(spec.model.adapter));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  JobSpec spec;
  try {
    spec = skytrain::protocol::parseJobSpec(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const skytrain::Error&) {
    return 0;
  }
  checkSpec(spec);
  return 0;
}
