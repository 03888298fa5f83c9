// C ABI of libskytrain_sentencepiece.so, a shim loaded with dlopen(RTLD_LOCAL |
// RTLD_DEEPBIND). libsentencepiece carries its own protobuf and exports its symbols; linked
// into a process with LibTorch's libprotobuf, the two interpose and crash at start-up.
// Behind this shim the copies never meet. Memory returned by the shim is freed by it.
#pragma once

#include <stddef.h>
#include <stdint.h>

extern "C" {

// Returns a handle, or null with *error set (free it with skytrain_spm_free_buffer).
void* skytrain_spm_load(const char* path, char** error);
void skytrain_spm_free(void* handle);
int skytrain_spm_vocab_size(void* handle);
// Encodes text; *ids is allocated by the shim. Returns 0 on success, else sets *error.
int skytrain_spm_encode(void* handle, const char* text, size_t size, int32_t** ids, size_t* count, char** error);
// Decodes ids; *text is allocated by the shim. Returns 0 on success, else sets *error.
int skytrain_spm_decode(void* handle, const int32_t* ids, size_t count, char** text, size_t* size, char** error);
void skytrain_spm_free_buffer(void* buffer);
}
