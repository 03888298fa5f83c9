// The coordinator's reading of its stages' profiles (daemon/coordinator/planning.h): a
// subspace model's stages must report the same frame, or the job fails naming both.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "daemon/coordinator/planning.h"
#include "daemon/protocol/failures.h"
#include "daemon/protocol/spec/job_spec.h"
#include "scheduler/error.h"
#include "tests/daemon/spec_test_helpers.h"

using nlohmann::json;

namespace {

// A stage's profile as a stage sends it, reporting `frame` (none: the key left out).
json profile(const char* frame, bool last) {
  const json points = json::array({json::array({1, 0.01}), json::array({2, 0.02})});
  json compute = {{"forward_s", points},          {"backward_s", points},
                  {"output_bytes", points},       {"gradient_bytes", points},
                  {"stash_bytes_per_sample", 1e3}, {"memory_budget_bytes", 0}};
  if (frame) compute["frame"] = frame;
  json link = last ? json() : json{{"bandwidth_bytes_per_s", 1e9}, {"delay_s", 0.001}, {"overhead_s", 1e-4}};
  return {{"compute", compute}, {"link", link}};
}

}  // namespace

TEST_CASE("a subspace model's stages must hold one frame: a stage that derived another fails the job naming both") {
  const auto spec = skytrain::protocol::parseJobSpec(skytrain::testing::validSpec().dump());
  REQUIRE(spec.stages.size() == 2);
  // The same frame, or none at all (not a subspace model): planned.
  CHECK(skytrain::daemon::plannerInput(spec, {profile("00aa", false), profile("00aa", true)}).stages.size() == 2);
  CHECK(skytrain::daemon::plannerInput(spec, {profile(nullptr, false), profile(nullptr, true)}).stages.size() == 2);
  // Another frame, or one missing: the job fails (bad model: a restart would meet it again).
  for (const char* other : {"00ab", static_cast<const char*>(nullptr)}) {
    try {
      skytrain::daemon::plannerInput(spec, {profile("00aa", false), profile(other, true)});
      FAIL("different frames were planned");
    } catch (const skytrain::Error& e) {
      const std::string what = e.what();
      CHECK(what.rfind(skytrain::protocol::kBadModel, 0) == 0);
      CHECK(what.find("different subspace frames (hash 00aa against " + std::string(other ? other : "")) !=
            std::string::npos);
    }
  }
  // A frame that is no string: a malformed profile.
  json crafted = profile("00aa", true);
  crafted["compute"]["frame"] = 7;
  CHECK_THROWS_AS(skytrain::daemon::plannerInput(spec, {profile("00aa", false), crafted}), skytrain::WireError);
}
