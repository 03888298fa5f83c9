// Built as its own shared library; see sentencepiece_shim.h for why.
#include "stages/tokens/sentencepiece_shim.h"

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

char* copyString(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(out, s.data(), s.size());
  out[s.size()] = '\0';
  return out;
}

}  // namespace

extern "C" {

void* skytrain_spm_load(const char* path, char** error) {
  auto* processor = new sentencepiece::SentencePieceProcessor();
  const auto status = processor->Load(path);
  if (!status.ok()) {
    *error = copyString(status.ToString());
    delete processor;
    return nullptr;
  }
  return processor;
}

void skytrain_spm_free(void* handle) { delete static_cast<sentencepiece::SentencePieceProcessor*>(handle); }

int skytrain_spm_vocab_size(void* handle) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->GetPieceSize();
}

int skytrain_spm_encode(void* handle, const char* text, size_t size, int32_t** ids, size_t* count, char** error) {
  std::vector<int> out;
  const auto status =
      static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Encode(std::string(text, size), &out);
  if (!status.ok()) {
    *error = copyString(status.ToString());
    return 1;
  }
  *ids = static_cast<int32_t*>(std::malloc(sizeof(int32_t) * (out.size() + 1)));
  for (size_t i = 0; i < out.size(); ++i) (*ids)[i] = out[i];
  *count = out.size();
  return 0;
}

int skytrain_spm_decode(void* handle, const int32_t* ids, size_t count, char** text, size_t* size, char** error) {
  std::string out;
  const auto status =
      static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Decode(std::vector<int>(ids, ids + count), &out);
  if (!status.ok()) {
    *error = copyString(status.ToString());
    return 1;
  }
  *text = copyString(out);
  *size = out.size();
  return 0;
}

void skytrain_spm_free_buffer(void* buffer) { std::free(buffer); }
}
