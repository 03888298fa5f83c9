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

}  // namespace skytrain::daemon
