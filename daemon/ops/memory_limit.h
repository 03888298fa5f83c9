// What memory this daemon may really use: its cgroup's limit where one is set (systemd's
// MemoryMax=, a container's), else the machine's physical memory. Admission's budget
// defaults to it, so a job the kernel would kill for memory is refused before it starts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace skytrain::daemon {

struct MemoryLimit {
  double bytes = 0;
  std::string source;  // where it was read: "cgroup v2 memory.max of /system.slice/...", "physical memory"
};

// "768.0 MB" (MiB, one decimal): how the daemon writes memory sizes in its messages.
std::string megabytes(double bytes);

// The tightest of: every cgroup v2 memory.max and every cgroup v1 memory.limit_in_bytes
// on the path of this process's cgroups (`procCgroup`), ancestors included (a parent's
// limit binds its children), found where `mountInfo` says each hierarchy is mounted; and
// the physical memory. A limit file that is absent, "max", unreadable or not a number does
// not count. Never throws.
MemoryLimit memoryLimit(const std::string& procCgroup = "/proc/self/cgroup",
                        const std::string& mountInfo = "/proc/self/mountinfo");

// This process's memory cgroups, its own first, then each ancestor up to the top its
// mount shows; v1's and v2's both where a hybrid machine has both.
struct CgroupDir {
  bool v2 = false;
  std::string path;  // e.g. /sys/fs/cgroup/system.slice/skytraind.service
};
std::vector<CgroupDir> memoryCgroups(const std::string& procCgroup = "/proc/self/cgroup",
                                     const std::string& mountInfo = "/proc/self/mountinfo");

// The kernel's memory record of this process's own cgroup: how many times its OOM killer
// killed a process there, and the highest usage it saw. oomKills is -1 when unknown.
struct MemoryEvents {
  int64_t oomKills = -1;
  double peakBytes = 0;  // 0 when the kernel keeps none (v2 before Linux 5.19)
  std::string cgroup;
};
MemoryEvents memoryEvents(const std::string& procCgroup = "/proc/self/cgroup",
                          const std::string& mountInfo = "/proc/self/mountinfo");

}  // namespace skytrain::daemon
