#include "daemon/ops/blas_info.h"

#include <dlfcn.h>

#include <fstream>
#include <sstream>

namespace skytrain::daemon {
namespace {

std::string classify(const std::string& path) {
  if (path.find("openblas") != std::string::npos) return "openblas";
  if (path.find("mkl") != std::string::npos) return "mkl";
  if (path.find("blis") != std::string::npos) return "blis";
  if (path.find("atlas") != std::string::npos) return "atlas";
  if (path.find("/blas/libblas.so") != std::string::npos) return "reference";
  return "unknown";
}

}  // namespace

BlasInfo detectBlas() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const auto base = path.substr(path.rfind('/') + 1);
    const bool blasLike = base.rfind("libblas.so", 0) == 0 || base.rfind("libopenblas", 0) == 0 ||
                          base.rfind("libmkl_rt", 0) == 0 || base.rfind("libblis", 0) == 0;
    if (blasLike) return {classify(path), path};
  }
  return {"unknown", ""};
}

bool setBlasThreads(int threads) {
  using SetThreads = void (*)(int);
  auto* set = reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (!set) return false;
  set(threads);
  return true;
}

}  // namespace skytrain::daemon
