// clang 14 accepts no "f16c" in __builtin_cpu_supports (g++ does, and clang from 15), so
// compression/codecs/half_codec.cpp does not compile with it. The fuzz build force-includes this
// into that one file: the same test, AVX from the builtin and F16C from CPUID leaf 1
// (ECX bit 29), as libgcc does. Delete it once the fuzz build moves to clang >= 15.
#pragma once

#if defined(__x86_64__) && defined(__clang__) && __clang_major__ < 15
#include <cpuid.h>

#include <cstring>

inline bool skytrainFuzzCpuSupports(const char* feature) {
  if (std::strcmp(feature, "f16c") == 0) {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  }
  if (std::strcmp(feature, "avx") == 0) return __builtin_cpu_supports("avx");
  return false;
}
#define __builtin_cpu_supports(feature) skytrainFuzzCpuSupports(feature)
#endif
