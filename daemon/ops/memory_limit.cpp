#include "daemon/ops/memory_limit.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace skytrain::daemon {
namespace {

constexpr size_t kMaxFileBytes = 64 * 1024;  // /proc/self/cgroup and a limit file, bounded

std::string readSmall(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string text(kMaxFileBytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

// A limit file's value in bytes; 0 when absent, "max" or not a plain number.
double readLimit(const std::string& path) {
  std::string text = readSmall(path);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos) return 0;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), nullptr, 10);
  return errno == 0 ? static_cast<double>(value) : 0;
}

// "/a/b/c" -> "", "/a", "/a/b", "/a/b/c": the cgroup and every ancestor. Empty when the
// path is not absolute or has a "." or ".." component (never outside the root).
std::vector<std::string> withAncestors(const std::string& path) {
  if (path.empty() || path[0] != '/') return {};
  std::vector<std::string> out{""};
  std::stringstream parts(path.substr(1));
  std::string part, prefix;
  while (std::getline(parts, part, '/')) {
    if (part.empty()) continue;
    if (part == "." || part == "..") return {};
    prefix += "/" + part;
    out.push_back(prefix);
  }
  return out;
}

// A cgroup hierarchy's mount: where it is, and which of its cgroups is that directory.
struct CgroupMount {
  bool v2 = false;
  std::string root;        // the cgroup mounted there, "/" unless a container sees only its own
  std::string mountPoint;  // e.g. /sys/fs/cgroup/memory
};

// mountinfo lines: "id parent dev root mountpoint options [tags] - fstype source superoptions".
std::vector<CgroupMount> memoryMounts(const std::string& mountInfo) {
  std::vector<CgroupMount> out;
  std::stringstream lines(readSmall(mountInfo));
  std::string line;
  while (std::getline(lines, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::stringstream head(line.substr(0, dash)), tail(line.substr(dash + 3));
    std::string id, parent, device, root, mountPoint, fsType, source, superOptions;
    if (!(head >> id >> parent >> device >> root >> mountPoint) || !(tail >> fsType >> source >> superOptions)) continue;
    const bool v1 = fsType == "cgroup" && ("," + superOptions + ",").find(",memory,") != std::string::npos;
    if (fsType == "cgroup2" || v1) out.push_back({fsType == "cgroup2", root, mountPoint});
  }
  return out;
}

}  // namespace

std::string megabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", bytes / (1024.0 * 1024.0));
  return text;
}

std::vector<CgroupDir> memoryCgroups(const std::string& procCgroup, const std::string& mountInfo) {
  std::vector<CgroupDir> out;
  const std::vector<CgroupMount> mounts = memoryMounts(mountInfo);
  // Lines "hierarchy-id:controllers:path"; v2's is "0::path", v1's memory line names it.
  std::stringstream lines(readSmall(procCgroup));
  std::string line;
  while (std::getline(lines, line)) {
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const bool v2 = line.substr(0, first) == "0" && controllers.empty();
    if (!v2 && ("," + controllers + ",").find(",memory,") == std::string::npos) continue;
    const std::string path = line.substr(second + 1);
    for (const auto& mount : mounts) {
      if (mount.v2 != v2) continue;
      // The part of the path below the mount's root (a container's mount shows only its own).
      const std::string root = mount.root == "/" ? "" : mount.root;
      if (path.compare(0, root.size(), root) != 0 || (path.size() > root.size() && path[root.size()] != '/')) continue;
      const std::string below = path.size() > root.size() ? path.substr(root.size()) : "/";
      const auto dirs = withAncestors(below);
      for (auto dir = dirs.rbegin(); dir != dirs.rend(); ++dir) out.push_back({v2, mount.mountPoint + *dir});
    }
  }
  return out;
}

MemoryLimit memoryLimit(const std::string& procCgroup, const std::string& mountInfo) {
  MemoryLimit limit;
  limit.bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  limit.source = "physical memory";
  for (const auto& cgroup : memoryCgroups(procCgroup, mountInfo)) {
    const double bytes = readLimit(cgroup.path + (cgroup.v2 ? "/memory.max" : "/memory.limit_in_bytes"));
    if (bytes > 0 && bytes < limit.bytes) {
      limit.bytes = bytes;
      limit.source = std::string(cgroup.v2 ? "cgroup v2 memory.max" : "cgroup v1 memory.limit_in_bytes") + " of " + cgroup.path;
    }
  }
  return limit;
}

MemoryEvents memoryEvents(const std::string& procCgroup, const std::string& mountInfo) {
  MemoryEvents events;
  // The nearest cgroup that keeps the record (a hybrid machine's v2 side has no memory
  // controller). v2 memory.events and v1 memory.oom_control both hold "oom_kill N" (Linux 4.13+).
  for (const auto& cgroup : memoryCgroups(procCgroup, mountInfo)) {
    std::stringstream lines(readSmall(cgroup.path + (cgroup.v2 ? "/memory.events" : "/memory.oom_control")));
    std::string key;
    int64_t value = 0;
    while (lines >> key >> value) {
      if (key == "oom_kill" && value >= 0) events.oomKills = value;
    }
    if (events.oomKills < 0) continue;
    events.cgroup = cgroup.path;
    events.peakBytes = readLimit(cgroup.path + (cgroup.v2 ? "/memory.peak" : "/memory.max_usage_in_bytes"));
    break;
  }
  return events;
}

}  // namespace skytrain::daemon
