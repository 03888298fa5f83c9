// parseZipDirectory (compression/wire/zip_directory.h) on any bytes: an archive is refused with
// skytrain::Error or read, and what is read keeps the limits and adds up: at most
// kMaxZipEntries entries, names of at most kMaxZipNameBytes, each entry's compressed data
// inside the input, and the uncompressed sizes summing, without overflow, to uncompressedBytes.
//
// Its seeds (corpus/zip_directory_fuzz/) were made once by hand: stored.zip and deflated.zip
// by Python's zipfile (as zip_directory_test's script writes them), zip64.zip (zip64 extra
// fields and end record) by that test's buildZip as in its ZIP64 case, torchscript.pt by
// torch.jit.script(torch.nn.Linear(1, 1)).save(...) (PyTorch writes a zip64 end record).
#include <cstddef>
#include <cstdint>
#include <string>

#include "compression/wire/zip_directory.h"
#include "scheduler/error.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace skytrain::compression;
  ZipDirectory directory;
  try {
    directory = parseZipDirectory(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const skytrain::Error&) {
    return 0;
  }
  FUZZ_REQUIRE(directory.entries.size() <= kMaxZipEntries, std::to_string(directory.entries.size()) + " entries");
  uint64_t sum = 0;
  for (const auto& e : directory.entries) {
    FUZZ_REQUIRE(e.name.size() <= kMaxZipNameBytes, std::to_string(e.name.size()) + "-byte name");
    FUZZ_REQUIRE(e.compressedBytes <= size, std::to_string(e.compressedBytes) + " compressed bytes in a " +
                                                std::to_string(size) + "-byte archive");
    FUZZ_REQUIRE(sum + e.uncompressedBytes >= sum, "the sum overflows");
    sum += e.uncompressedBytes;
  }
  FUZZ_REQUIRE(sum == directory.uncompressedBytes,
               "entries sum to " + std::to_string(sum) + ", uncompressedBytes is " +
                   std::to_string(directory.uncompressedBytes));
  return 0;
}
