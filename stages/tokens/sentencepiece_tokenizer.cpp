#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>

#include "scheduler/error.h"
#include "stages/tokens/sentencepiece_shim.h"
#include "stages/tokens/tokenizer.h"

namespace skytrain::stages {
namespace {

// The shim's functions, resolved once.
struct ShimApi {
  decltype(&skytrain_spm_load) load;
  decltype(&skytrain_spm_free) free;
  decltype(&skytrain_spm_vocab_size) vocabSize;
  decltype(&skytrain_spm_encode) encode;
  decltype(&skytrain_spm_decode) decode;
  decltype(&skytrain_spm_free_buffer) freeBuffer;
};

std::vector<std::string> shimCandidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("SKYTRAIN_SENTENCEPIECE_SHIM")) out.emplace_back(env);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back((exe.parent_path() / "libskytrain_sentencepiece.so").string());
    // Installed: <prefix>/bin/skytraind and <prefix>/<libdir>/skytrain/ (the package: /usr/lib/skytrain).
    out.push_back((exe.parent_path() / SKYTRAIN_SENTENCEPIECE_SHIM_FROM_BINDIR).lexically_normal().string());
  }
  out.emplace_back(SKYTRAIN_SENTENCEPIECE_SHIM_BUILD_PATH);
  return out;
}

const ShimApi& shim() {
  static std::once_flag once;
  static ShimApi api{};
  static std::string failure;
  std::call_once(once, [] {
    void* handle = nullptr;
    std::string tried;
    for (const auto& path : shimCandidates()) {
      handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (handle) break;
      tried += "\n  " + path + ": " + ::dlerror();
    }
    if (!handle) {
      failure = "the SentencePiece shim libskytrain_sentencepiece.so could not be loaded:" + tried;
      return;
    }
    auto resolve = [&](const char* name) {
      void* symbol = ::dlsym(handle, name);
      if (!symbol) failure = std::string("the SentencePiece shim lacks ") + name;
      return symbol;
    };
    api.load = reinterpret_cast<decltype(api.load)>(resolve("skytrain_spm_load"));
    api.free = reinterpret_cast<decltype(api.free)>(resolve("skytrain_spm_free"));
    api.vocabSize = reinterpret_cast<decltype(api.vocabSize)>(resolve("skytrain_spm_vocab_size"));
    api.encode = reinterpret_cast<decltype(api.encode)>(resolve("skytrain_spm_encode"));
    api.decode = reinterpret_cast<decltype(api.decode)>(resolve("skytrain_spm_decode"));
    api.freeBuffer = reinterpret_cast<decltype(api.freeBuffer)>(resolve("skytrain_spm_free_buffer"));
  });
  if (!failure.empty()) throw Error(failure);
  return api;
}

// Takes ownership of a shim-allocated error string.
[[noreturn]] void throwShimError(const ShimApi& api, const std::string& what, char* error) {
  const std::string message = what + ": " + (error ? error : "unknown error");
  api.freeBuffer(error);
  throw Error(message);
}

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& modelPath) : api_(shim()), path_(modelPath) {
    char* error = nullptr;
    handle_ = api_.load(modelPath.c_str(), &error);
    if (!handle_) throwShimError(api_, "sentencepiece model \"" + modelPath + "\" could not be loaded", error);
  }
  ~SentencePieceTokenizer() override { api_.free(handle_); }

  std::string name() const override { return "sentencepiece:" + path_; }
  int vocabSize() const override { return api_.vocabSize(handle_); }

  std::vector<int32_t> encode(const std::string& text) const override {
    int32_t* ids = nullptr;
    size_t count = 0;
    char* error = nullptr;
    if (api_.encode(handle_, text.data(), text.size(), &ids, &count, &error) != 0) {
      throwShimError(api_, "sentencepiece encode failed", error);
    }
    std::vector<int32_t> out(ids, ids + count);
    api_.freeBuffer(ids);
    return out;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    char* text = nullptr;
    size_t size = 0;
    char* error = nullptr;
    if (api_.decode(handle_, ids.data(), ids.size(), &text, &size, &error) != 0) {
      throwShimError(api_, "sentencepiece decode failed", error);
    }
    std::string out(text, size);
    api_.freeBuffer(text);
    return out;
  }

 private:
  const ShimApi& api_;
  std::string path_;
  void* handle_ = nullptr;
};

}  // namespace

std::unique_ptr<Tokenizer> makeSentencePieceTokenizer(const std::string& modelPath) {
  return std::make_unique<SentencePieceTokenizer>(modelPath);
}

}  // namespace skytrain::stages
