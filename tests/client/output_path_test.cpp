// `export -o` and `plot -o` write only a new file or over a regular one (client/export/export.h).
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "client/export/export.h"
#include "scheduler/error.h"

using skytrain::client::checkOutputPath;

TEST_CASE("an output path may be new or a regular file, nothing else") {
  const auto dir = std::filesystem::temp_directory_path() / ("skytrain_output_path_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  CHECK_NOTHROW(checkOutputPath((dir / "new.safetensors").string()));
  std::ofstream(dir / "old.safetensors") << "x";
  CHECK_NOTHROW(checkOutputPath((dir / "old.safetensors").string()));
  CHECK_THROWS_WITH(checkOutputPath("/dev/null"), Catch::Contains("\"/dev/null\" exists and is not a regular file"));
  CHECK_THROWS_WITH(checkOutputPath(dir.string()), Catch::Contains("is not a regular file"));
  std::filesystem::create_symlink("/dev/null", dir / "link");
  CHECK_THROWS_WITH(checkOutputPath((dir / "link").string()), Catch::Contains("is not a regular file"));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string socketPath = (dir / "sock").string();
  socketPath.copy(address.sun_path, sizeof address.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  CHECK_THROWS_WITH(checkOutputPath(socketPath), Catch::Contains("is not a regular file"));
  ::close(fd);
  std::filesystem::remove_all(dir);
}
