// CURVE key files, authorized keys and known daemons (daemon/protocol/keys.h).
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <filesystem>
#include <fstream>

#include "daemon/protocol/keys.h"
#include "scheduler/error.h"

using namespace skytrain::protocol;
namespace fs = std::filesystem;

namespace {

struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("skytrain_keys_test_" + std::to_string(::getpid()));
  ScratchDir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("keygen writes a private secret file and a public one, and never overwrites") {
  ScratchDir dir;
  const KeyPair keys = generateKeyPair("laptop-1");
  CHECK(isZ85Key(keys.publicKey));
  CHECK(isZ85Key(keys.secretKey));
  const std::string secret = writeKeyPair(keys, dir.path.string());
  struct stat st {};
  REQUIRE(::stat(secret.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  const KeyPair loaded = loadKeyPair(secret);
  CHECK(loaded.name == "laptop-1");
  CHECK(loaded.publicKey == keys.publicKey);
  CHECK(loaded.secretKey == keys.secretKey);
  std::ifstream pub(dir.path / "laptop-1.pub");
  std::string line;
  std::getline(pub, line);
  CHECK(line == keys.publicKey + " laptop-1");
  CHECK_THROWS_WITH(writeKeyPair(generateKeyPair("laptop-1"), dir.path.string()), Catch::Contains("refusing to overwrite"));
  CHECK_THROWS_WITH(generateKeyPair("../evil"), Catch::Contains("key name"));
}

TEST_CASE("a secret key file readable by others, or inconsistent, is refused") {
  ScratchDir dir;
  const KeyPair keys = generateKeyPair("k");
  const std::string secret = writeKeyPair(keys, dir.path.string());
  ::chmod(secret.c_str(), 0644);
  CHECK_THROWS_WITH(loadKeyPair(secret), Catch::Contains("mode 0644") && Catch::Contains("chmod 600"));
  const KeyPair other = generateKeyPair("o");
  CHECK_THROWS_WITH(parseKeyPair("public " + other.publicKey + "\nsecret " + keys.secretKey + "\n", "f"),
                    Catch::Contains("does not belong"));
  CHECK_THROWS_WITH(parseKeyPair("secret short\n", "f"), Catch::Contains("Z85"));
  CHECK_THROWS_WITH(parseKeyPair("# nothing\n", "f"), Catch::Contains("no \"secret\" line"));
  CHECK_THROWS_WITH(readBoundedFile("/dev/zero", 100, "key"), Catch::Contains("not a regular file"));
}

TEST_CASE("keygen creates a missing folder 0700; a public key file is not taken for a secret one, nor the reverse") {
  ScratchDir scratch;
  const fs::path dir = scratch.path / "new" / "keys";
  REQUIRE_FALSE(fs::exists(dir));
  const KeyPair keys = generateKeyPair("cloud-a");
  const std::string secret = writeKeyPair(keys, dir.string());
  struct stat st {};
  REQUIRE(::stat(dir.c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((st.st_mode & 0777) == 0700);
  const std::string pub = (dir / "cloud-a.pub").string();
  // A NAME.pub given as --key: named as a public key file, not "chmod 600 it".
  CHECK_THROWS_WITH(loadKeyPair(pub), Catch::Contains("\"" + pub + "\" is a public key file; give the secret key file") &&
                                          !Catch::Contains("chmod 600"));
  // A NAME.key given where a public key belongs, as a path or as @FILE.
  CHECK_THROWS_WITH(publicKeyArgument(secret), Catch::Contains("\"" + secret + "\" is a secret key file: give its NAME.pub"));
  CHECK_THROWS_WITH(publicKeyArgument("@" + secret), Catch::Contains("is a secret key file"));
  std::string name;
  CHECK(publicKeyArgument("@" + pub, &name) == keys.publicKey);
  CHECK(name == "cloud-a");
  CHECK_THROWS_WITH(publicKeyArgument((dir / "missing.pub").string()),
                    Catch::Contains("is neither a 40-character Z85 public key nor a file: No such file or directory"));
  // One key in 85 starts with '@' (a Z85 character): it is the key, not "@FILE".
  uint8_t bytes[32] = {0xFD, 0x50};  // the first 4 bytes, 0xFD500000, encode to '@' first
  char text[41];
  REQUIRE(zmq_z85_encode(text, bytes, 32) != nullptr);
  const std::string at(text);
  REQUIRE(at[0] == '@');
  REQUIRE(isZ85Key(at));
  CHECK(publicKeyArgument(at) == at);
}

TEST_CASE("authorized keys: roles and names, errors name the line") {
  const KeyPair a = generateKeyPair("a"), b = generateKeyPair("b");
  const auto keys = parseAuthorizedKeys("# comment\n\n" + a.publicKey + " admin alice\n  " + b.publicKey +
                                            " daemon cloud-b\n",
                                        "ak");
  REQUIRE(keys.size() == 2);
  CHECK(keys.at(a.publicKey).role == Role::Admin);
  CHECK(keys.at(b.publicKey).name == "cloud-b");
  CHECK_THROWS_WITH(parseAuthorizedKeys(a.publicKey + " root alice\n", "ak"), Catch::Contains("ak:1: role \"root\""));
  CHECK_THROWS_WITH(parseAuthorizedKeys("\n" + a.publicKey + " client\n", "ak"), Catch::Contains("ak:2:"));
  CHECK_THROWS_WITH(parseAuthorizedKeys("xyz client c\n", "ak"), Catch::Contains("not a 40-character Z85"));
  CHECK_THROWS_WITH(parseAuthorizedKeys(a.publicKey + " client c\n" + a.publicKey + " admin d\n", "ak"),
                    Catch::Contains("listed twice"));
}

TEST_CASE("a key may contain '#': only whole lines are comments") {
  // '#' is a Z85 digit; generate until a key has one.
  KeyPair k;
  do k = generateKeyPair("h"); while (k.publicKey.find('#') == std::string::npos);
  CHECK(parseAuthorizedKeys(k.publicKey + " client h\n", "ak").count(k.publicKey) == 1);
  CHECK(parseKnownDaemons("tcp://h:7100 " + k.publicKey + "\n", "kd").at("tcp://h:7100") == k.publicKey);
}

TEST_CASE("a key with a NUL inside is not a key (found by fuzzing)") {
  std::string key = generateKeyPair("n").publicKey;
  key[5] = '\0';
  CHECK_FALSE(isZ85Key(key));
  CHECK_THROWS_WITH(parseKeyPair("secret " + key + "\n", "f"), Catch::Contains("Z85"));
}

TEST_CASE("known daemons map endpoints to keys; a missing file is an empty list") {
  const KeyPair a = generateKeyPair("a");
  const auto known = parseKnownDaemons("tcp://cloud-a:7100 " + a.publicKey + "\n", "kd");
  CHECK(known.at("tcp://cloud-a:7100") == a.publicKey);
  CHECK(loadKnownDaemons("/nonexistent/known_daemons").empty());
  CHECK_THROWS_WITH(parseKnownDaemons("cloud-a:7100 " + a.publicKey + "\n", "kd"), Catch::Contains("kd:1:"));
}

TEST_CASE("loopback endpoints") {
  CHECK(isLoopbackEndpoint("tcp://127.0.0.1:7100"));
  CHECK(isLoopbackEndpoint("tcp://127.1.2.3:*"));
  CHECK(isLoopbackEndpoint("tcp://[::1]:7100"));
  CHECK(isLoopbackEndpoint("tcp://localhost:7100"));
  CHECK(isLoopbackEndpoint("ipc:///run/skytrain.sock"));
  CHECK_FALSE(isLoopbackEndpoint("tcp://0.0.0.0:7100"));
  CHECK_FALSE(isLoopbackEndpoint("tcp://*:7100"));
  CHECK_FALSE(isLoopbackEndpoint("tcp://127.0.0.1.evil.com:7100"));
  CHECK_FALSE(isLoopbackEndpoint("tcp://10.0.0.1:7100"));
  CHECK_FALSE(isLoopbackEndpoint("tcp://eth0;127.0.0.1:7100"));
  CHECK_FALSE(isLoopbackEndpoint("tcp://cloud-a:7100"));
}
