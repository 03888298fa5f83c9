// What every fuzz target shares: a property check that aborts, so libFuzzer records the
// input as a crash. A target catches skytrain::Error, the documented refusal; any other
// exception escapes and is a crash too.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_REQUIRE(cond, what)                                                        \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s: %s\n", __FILE__, __LINE__, \
                   #cond, std::string(what).c_str());                                   \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)
