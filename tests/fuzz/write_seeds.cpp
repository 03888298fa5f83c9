// Writes the binary seed corpora once: real tensor frames, real codec payloads (in
// codec_input.h's layout), real key files and real safetensors files. Its output is
// committed under corpus/:
//
//   build-fuzz/write_seeds tests/fuzz/corpus
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "compression/codec_registry.h"
#include "compression/side_tokens.h"
#include "scheduler/error.h"
#include "compression/wire/tensor_frame.h"
#include "daemon/protocol/keys.h"
#include "stages/weights/safetensors.h"
#include "tests/fuzz/codec_input.h"

namespace {

using namespace skytrain;
namespace fs = std::filesystem;

void write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

std::string shapeName(const std::vector<int64_t>& shape) {
  std::string out;
  for (int64_t d : shape) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out.empty() ? "scalar" : out;
}

std::string safeName(std::string spec) {
  for (char& c : spec) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return spec;
}

// Frames as a stage sends them: tensor_frame_fuzz's input is a 2-byte header length, the
// header, then the payload.
void writeFrames(const fs::path& dir) {
  struct Case {
    compression::FrameDirection direction;
    std::string codec;
    std::vector<int64_t> shape;
    c10::ScalarType dtype;
  };
  const Case cases[] = {{compression::FrameDirection::Forward, "none", {2, 3}, torch::kFloat},
                        {compression::FrameDirection::Backward, "fp16", {4, 8}, torch::kFloat},
                        {compression::FrameDirection::Eval, "int8", {3, 16}, torch::kBFloat16},
                        {compression::FrameDirection::Forward, "fp16+svd:0.5", {2, 4, 8}, torch::kFloat},
                        {compression::FrameDirection::Backward, "ef(int8+topk:0.1)", {5, 12}, torch::kFloat},
                        {compression::FrameDirection::Probe, "none", {1}, torch::kFloat},
                        {compression::FrameDirection::ProbeReply, "none", {}, torch::kFloat},
                        {compression::FrameDirection::Forward, "int4", {0, 4}, torch::kFloat}};
  uint64_t step = 7;
  for (const auto& c : cases) {
    compression::TensorFrame frame;
    frame.job = 0x0123456789abcdefULL;
    frame.step = step++;
    frame.microBatch = 3;
    frame.stage = 1;
    frame.direction = c.direction;
    frame.tensor = compression::builtinCodecs().make(c.codec)->encode(torch::randn(c.shape).to(c.dtype));
    const std::string header = compression::encodeFrameHeader(frame);
    std::string input = {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
    write(dir, "frame-" + safeName(compression::toString(c.direction)) + "-" + safeName(c.codec) + "-" + shapeName(c.shape),
          input + header + frame.tensor.payload);
  }
}

void writeCodecPayloads(const fs::path& dir) {
  const std::vector<std::vector<int64_t>> shapes = {{4, 16}, {3, 5, 7}, {}, {0, 3}, {64}};
  for (size_t i = 0; i < fuzz::kCodecSpecs.size(); ++i) {
    for (const auto& shape : shapes) {
      auto codec = compression::builtinCodecs().make(fuzz::kCodecSpecs[i]);
      if (auto* conditioned = compression::tokenConditioned(*codec)) {  // "+pred": [B, T, d] with its token IDs
        if (shape.size() != 3) continue;
        conditioned->setTokens(torch::arange(shape[0] * shape[1], torch::kLong).remainder(11).reshape({shape[0], shape[1]}));
      }
      compression::EncodedTensor encoded;
      try {
        encoded = codec->encode(torch::randn(shape));
      } catch (const skytrain::Error&) {
        continue;  // a codec of integer tensors ("tokens"): its seeds come from the frames above
      }
      const fuzz::CodecInput input{i, encoded.dtype, shape, encoded.payload};
      write(dir, "codec-" + safeName(fuzz::kCodecSpecs[i]) + "-" + shapeName(shape), fuzz::writeCodecInput(input));
    }
  }
}

std::string readFile(const fs::path& path) {
  std::ostringstream out;
  out << std::ifstream(path, std::ios::binary).rdbuf();
  return out.str();
}

void writeKeyFiles(const fs::path& dir) {
  const auto daemon = protocol::generateKeyPair("stage-1");
  const auto client = protocol::generateKeyPair("laptop-1");
  const auto admin = protocol::generateKeyPair("ops");
  const fs::path scratch = fs::temp_directory_path() / ("skytrain-seeds-" + std::to_string(::getpid()));
  fs::create_directories(scratch);
  write(dir, "secret.key", readFile(protocol::writeKeyPair(daemon, scratch.string())));
  fs::remove_all(scratch);
  write(dir, "authorized_keys",
        "# <public key> <role> <name>\n" + daemon.publicKey + " daemon stage-1\n" + client.publicKey +
            " client laptop-1\n\n" + admin.publicKey + " admin ops\n");
  write(dir, "known_daemons", "# <control endpoint> <public key>\ntcp://10.0.0.2:7100 " + daemon.publicKey +
                                  "\nipc:///run/skytrain/control.sock " + admin.publicKey + "\n");
}

// Safetensors files as checkpoints hold them. The corpus also holds one written by Python:
// tests/stages/data/from_python.safetensors, copied by hand.
void writeSafetensors(const fs::path& dir) {
  using stages::SafeTensors;
  const auto save = [&](const std::string& name, const SafeTensors& file) {
    write(dir, name + ".safetensors", stages::encodeSafetensors(file));
  };
  save("empty", {});
  save("empty-metadata", {{}, {{"format", "pt"}, {"step", "0"}}});
  save("f32-matrix", {{{"weight", torch::randn({3, 4})}}, {}});
  SafeTensors all{{}, {{"format", "pt"}, {"job", "gpt-web"}}};
  const std::pair<const char*, c10::ScalarType> dtypes[] = {{"f32", torch::kFloat}, {"f16", torch::kHalf},
                                                            {"bf16", torch::kBFloat16}, {"i64", torch::kLong},
                                                            {"i32", torch::kInt}, {"i8", torch::kChar},
                                                            {"u8", torch::kByte}};
  for (const auto& [name, dtype] : dtypes) {
    const int64_t low = dtype == torch::kByte ? 0 : -120;  // in range: no wrapping conversions
    all.tensors.emplace_back(name, c10::isFloatingType(dtype) ? (torch::randn({2, 3}) * 50).to(dtype)
                                                              : torch::randint(low, 120, {2, 3}).to(dtype));
  }
  save("dtypes", all);
  save("scalar", {{{"step", torch::tensor(41.5f)}}, {}});
  save("zero-size", {{{"bias", torch::randn({3})}, {"none", torch::zeros({0, 3})}, {"tail", torch::ones({2}, torch::kLong)}}, {}});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_seeds CORPUS_DIR (tests/fuzz/corpus)\n");
    return 2;
  }
  torch::manual_seed(2026);
  const fs::path root = argv[1];
  writeFrames(root / "tensor_frame_fuzz");
  writeCodecPayloads(root / "codec_decode_fuzz");
  writeKeyFiles(root / "key_files_fuzz");
  writeSafetensors(root / "safetensors_fuzz");
  return 0;
}
