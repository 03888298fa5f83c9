// memoryLimit: the cgroup limit found where mountinfo says each hierarchy is, ancestors
// included, v1 and v2, and every malformed file ignored rather than trusted or thrown on.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/ops/memory_limit.h"

using skytrain::daemon::memoryLimit;
namespace fs = std::filesystem;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct FakeCgroups {
  fs::path root;
  FakeCgroups() {
    char pattern[] = "/tmp/skytrain-cgroup-XXXXXX";
    root = ::mkdtemp(pattern);
  }
  ~FakeCgroups() { fs::remove_all(root); }
  void write(const std::string& relative, const std::string& text) const {
    const fs::path p = root / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string path(const std::string& relative) const { return (root / relative).string(); }
  // A mountinfo line for a cgroup mount of `root` at root/<mountPoint>.
  std::string mount(const std::string& cgroupRoot, const std::string& mountPoint, bool v2) const {
    return "35 31 0:32 " + cgroupRoot + " " + path(mountPoint) + " rw,relatime - " + (v2 ? "cgroup2 cgroup2 rw" : "cgroup cgroup rw,memory") + "\n";
  }
};

double physical() { return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE)); }

}  // namespace

TEST_CASE("a cgroup v2 memory.max binds, a parent's too") {
  FakeCgroups f;
  f.write("mountinfo", f.mount("/", "v2", true));
  f.write("cgroup", "0::/system.slice/skytraind.service\n");
  f.write("v2/system.slice/skytraind.service/memory.max", "max\n");
  SECTION("the service's own limit") {
    f.write("v2/system.slice/skytraind.service/memory.max", "2147483648\n");
    const auto limit = memoryLimit(f.path("cgroup"), f.path("mountinfo"));
    CHECK(limit.bytes == 2 * kGiB);
    CHECK(limit.source == "cgroup v2 memory.max of " + f.path("v2") + "/system.slice/skytraind.service");
  }
  SECTION("the slice above it, when tighter") {
    f.write("v2/system.slice/skytraind.service/memory.max", "8589934592\n");
    f.write("v2/system.slice/memory.max", "1073741824\n");
    const auto limit = memoryLimit(f.path("cgroup"), f.path("mountinfo"));
    CHECK(limit.bytes == 1 * kGiB);
    CHECK(limit.source.find("system.slice") != std::string::npos);
  }
  SECTION("\"max\" everywhere: the physical memory") {
    const auto limit = memoryLimit(f.path("cgroup"), f.path("mountinfo"));
    CHECK(limit.bytes == physical());
    CHECK(limit.source == "physical memory");
  }
}

TEST_CASE("a cgroup v1 memory.limit_in_bytes, under a container's own mount") {
  FakeCgroups f;
  // The container sees its own cgroup (/docker/abc) mounted as the hierarchy's top.
  f.write("mountinfo", f.mount("/docker/abc", "memory", false) + f.mount("/", "unified", true));
  f.write("cgroup", "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc/job\n0::/\n");
  f.write("memory/memory.limit_in_bytes", "3221225472\n");
  f.write("memory/job/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "unlimited"
  const auto limit = memoryLimit(f.path("cgroup"), f.path("mountinfo"));
  CHECK(limit.bytes == 3 * kGiB);
  CHECK(limit.source == "cgroup v1 memory.limit_in_bytes of " + f.path("memory"));
}

TEST_CASE("malformed and hostile files are ignored, never trusted") {
  FakeCgroups f;
  f.write("mountinfo", f.mount("/", "v2", true) + "garbage line without a separator\n - \n");
  SECTION("limits that are not plain numbers") {
    for (const char* text : {"", "-1\n", "1e9\n", "12 MB\n", "0\n", "99999999999999999999999\n", "0x100000\n"}) {
      f.write("cgroup", "0::/a\n");
      f.write("v2/a/memory.max", text);
      const auto limit = memoryLimit(f.path("cgroup"), f.path("mountinfo"));
      INFO(text);
      CHECK(limit.bytes == physical());
    }
  }
  SECTION("a path that climbs out of the mount is not followed") {
    f.write("memory.max", "1048576\n");  // beside the mount point, not under it
    f.write("cgroup", "0::/../\n");
    CHECK(memoryLimit(f.path("cgroup"), f.path("mountinfo")).bytes == physical());
  }
  SECTION("a cgroup outside a container's mount root is not looked for under it") {
    f.write("mountinfo", f.mount("/docker/abc", "v2", true));
    f.write("cgroup", "0::/docker/abcdef\n");  // a sibling whose name shares the prefix
    f.write("v2/memory.max", "1048576\n");
    CHECK(memoryLimit(f.path("cgroup"), f.path("mountinfo")).bytes == physical());
  }
  SECTION("missing files") {
    CHECK(memoryLimit(f.path("none"), f.path("none")).bytes == physical());
  }
}
