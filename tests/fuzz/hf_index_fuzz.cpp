// A Hugging Face directory's index (stages/weights/hf_checkpoint.h) on any bytes: the input is
// written as model.safetensors.index.json beside a config.json and one real shard, and the
// directory is opened; it is refused with skytrain::Error or opened, and an opened one only
// names tensors its shard holds, each readable with the bytes its header says.
#include <torch/torch.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "scheduler/error.h"
#include "stages/weights/hf_checkpoint.h"
#include "stages/weights/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace fs = std::filesystem;
fs::path dir;

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);
  dir = fs::temp_directory_path() / ("skytrain-hf-index-fuzz-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write(dir / "config.json", R"({"model_type": "llama"})");
  skytrain::stages::SafeTensors shard;
  shard.tensors.emplace_back("model.norm.weight", torch::ones({4}));
  shard.tensors.emplace_back("lm_head.weight", torch::ones({2, 4}, torch::kBFloat16));
  write(dir / "model-00001-of-00001.safetensors", skytrain::stages::encodeSafetensors(shard));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write(dir / "model.safetensors.index.json", std::string(reinterpret_cast<const char*>(data), size));
  try {
    skytrain::stages::HfCheckpoint checkpoint(dir.string());
    FUZZ_REQUIRE(checkpoint.files() == 1, std::to_string(checkpoint.files()) + " files opened");
    for (const char* name : {"model.norm.weight", "lm_head.weight"}) {
      FUZZ_REQUIRE(checkpoint.has(name), std::string(name) + " is missing from an opened directory");
      FUZZ_REQUIRE(checkpoint.read(name).numel() > 0, std::string(name) + " read empty");
    }
  } catch (const skytrain::Error&) {
  }
  return 0;
}
