#include <catch2/catch.hpp>

#include "daemon/daemon.h"
#include "daemon/ops/blas_info.h"
#include "daemon/ops/config.h"
#include "scheduler/error.h"

using namespace skytrain::daemon;

TEST_CASE("a daemon config parses, with defaults") {
  const auto c = parseDaemonConfig(R"({"secret_key_file": "/k", "authorized_keys": "/a", "state_dir": "/tmp/s",
                                       "torch_threads": 2})");
  CHECK(c.secretKeyFile == "/k");
  CHECK(c.prepareTimeoutS == 60);
  CHECK(c.controlEndpoint == "tcp://0.0.0.0:7100");
  CHECK(c.dataEndpoint == "tcp://0.0.0.0:7101");
  CHECK(c.stateDir == "/tmp/s");
  CHECK(c.torchThreads == 2);
  CHECK(c.logFormat == "text");
  CHECK(parseDaemonConfig(R"({"secret_key_file": "/k", "authorized_keys": "/a", "log_format": "json"})").logFormat == "json");
}

TEST_CASE("bad daemon configs name the field") {
  CHECK_THROWS_WITH(parseDaemonConfig(R"({"insecure": true, "ports": 3})"), Catch::Contains("$.ports"));
  CHECK_THROWS_WITH(parseDaemonConfig(R"({"insecure": true, "log_level": "loud"})"), Catch::Contains("$.log_level"));
  CHECK_THROWS_WITH(parseDaemonConfig(R"({"insecure": true, "log_format": "xml"})"), Catch::Contains("$.log_format"));
  // Without CURVE keys a daemon must be told explicitly that it runs unencrypted.
  CHECK_THROWS_WITH(parseDaemonConfig(R"({})"), Catch::Contains("$.secret_key_file"));
  CHECK_THROWS_WITH(parseDaemonConfig(R"({"secret_key_file": "/k"})"), Catch::Contains("$.authorized_keys"));
  CHECK_THROWS_WITH(loadDaemonConfig("/nonexistent/skytraind.json"), Catch::Contains("/nonexistent/skytraind.json"));
}

TEST_CASE("private_address is a private or loopback IP: Gloo's connections have no authentication") {
  const std::string keys = R"("secret_key_file": "/k", "authorized_keys": "/a", )";
  for (const char* good : {"10.1.2.3", "172.16.0.9", "172.31.255.1", "192.168.1.1", "127.0.0.1", "::1", "fd00::5"}) {
    INFO(good);
    CHECK(parseDaemonConfig("{" + keys + R"("private_address": ")" + good + "\"}").privateAddress == good);
  }
  for (const char* bad : {"8.8.8.8", "172.32.0.1", "0.0.0.0", "2001:db8::1", "node1.cluster", "10.0.0.1:7000"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parseDaemonConfig("{" + keys + R"("private_address": ")" + bad + "\"}"),
                      Catch::Contains("$.private_address"));
  }
}

TEST_CASE("an insecure daemon binds loopback only") {
  // The example config's wildcard endpoints are refused with the reason.
  CHECK_THROWS_WITH(parseDaemonConfig(R"({"insecure": true})"),
                    Catch::Contains("$.control_endpoint") && Catch::Contains("loopback"));
  CHECK_THROWS_WITH(parseDaemonConfig(R"({"insecure": true, "control_endpoint": "tcp://127.0.0.1:1",
                                          "data_endpoint": "tcp://10.0.0.1:2"})"),
                    Catch::Contains("$.data_endpoint"));
  CHECK_THROWS_WITH(parseDaemonConfig(R"({"insecure": true, "control_endpoint": "tcp://127.0.0.1:1",
                                          "data_endpoint": "tcp://127.0.0.1:2", "advertise_data_endpoint": "tcp://h:3"})"),
                    Catch::Contains("$.advertise_data_endpoint"));
  const auto c = parseDaemonConfig(R"({"insecure": true, "control_endpoint": "tcp://127.0.0.1:*",
                                       "data_endpoint": "ipc:///tmp/d", "state_dir": "/tmp/s"})");
  CHECK(c.insecure);
  REQUIRE(c.dataRoots.size() == 1);
  CHECK(c.dataRoots[0] == "/tmp/s/data");
  // Keys and insecure at once is a contradiction, not a choice the daemon makes silently.
  CHECK_THROWS_WITH(parseDaemonConfig(R"({"insecure": true, "control_endpoint": "tcp://127.0.0.1:*",
                                          "data_endpoint": "tcp://127.0.0.1:*", "secret_key_file": "/k"})"),
                    Catch::Contains("choose one"));
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
