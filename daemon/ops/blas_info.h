// Which BLAS library this process loaded: Debian's LibTorch calls whichever libblas.so.3
// the alternatives system selects, and the reference one is 15-40x slower than OpenBLAS.
#pragma once

#include <string>

namespace skytrain::daemon {

struct BlasInfo {
  std::string name;  // "openblas", "reference", "mkl", "blis", "atlas" or "unknown"
  std::string path;  // resolved path of the loaded library, empty if none found
  bool isReference() const { return name == "reference"; }
};

// Reads /proc/self/maps; call after LibTorch has been loaded.
BlasInfo detectBlas();

// Sets OpenBLAS's own thread count, which torch::set_num_threads leaves alone: its pool
// threads spin while they wait for work, so two daemons sharing cores slow each other
// down unless each keeps to its share. Returns false when the BLAS is not OpenBLAS.
bool setBlasThreads(int threads);

}  // namespace skytrain::daemon
