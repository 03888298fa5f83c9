#include <catch2/catch.hpp>

#include "daemon/blas_info.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "scheduler/error.h"

using namespace skytrain::daemon;

TEST_CASE("a daemon config parses, with defaults") {
  const auto c = parseDaemonConfig(R"({"insecure": true, "state_dir": "/tmp/s", "torch_threads": 2})");
  CHECK(c.controlEndpoint == "tcp://0.0.0.0:7100");
  CHECK(c.dataEndpoint == "tcp://0.0.0.0:7101");
  CHECK(c.stateDir == "/tmp/s");
  CHECK(c.torchThreads == 2);
}

TEST_CASE("bad daemon configs name the field") {
  CHECK_THROWS_WITH(parseDaemonConfig(R"({"insecure": true, "ports": 3})"), Catch::Contains("$.ports"));
  CHECK_THROWS_WITH(parseDaemonConfig(R"({"insecure": true, "log_level": "loud"})"), Catch::Contains("$.log_level"));
  // Without CURVE keys a daemon must be told explicitly that it runs unencrypted.
  CHECK_THROWS_WITH(parseDaemonConfig(R"({})"), Catch::Contains("$.insecure"));
  CHECK_THROWS_WITH(loadDaemonConfig("/nonexistent/skytraind.json"), Catch::Contains("/nonexistent/skytraind.json"));
}

TEST_CASE("wildcard endpoints are advertised under a reachable host") {
  CHECK(advertisedEndpoint("tcp://0.0.0.0:7100", "cloud-a.example") == "tcp://cloud-a.example:7100");
  CHECK(advertisedEndpoint("tcp://127.0.0.1:5555", "ignored") == "tcp://127.0.0.1:5555");
  CHECK(advertisedEndpoint("tcp://0.0.0.0:7100", "").find("0.0.0.0") == std::string::npos);
}

TEST_CASE("the BLAS in use is detected") {
  const auto blas = detectBlas();
  INFO("BLAS " << blas.name << " at " << blas.path);
  CHECK_FALSE(blas.path.empty());
  // deploy/install-deps.sh installs OpenBLAS; the reference BLAS here means a broken install.
  CHECK_FALSE(blas.isReference());
}
