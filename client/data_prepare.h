// `skytrain data prepare`: text or JSONL to pre-tokenised shards (stages/tokens/token_files.h) and
// their manifest, tokenised on every core. The same input gives the same bytes, whatever the
// number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace skytrain::client {

struct PrepareOptions {
  std::vector<std::string> inputs;  // text or .jsonl files, read in order
  std::string output;               // the directory to write (created; must be empty if it exists)
  std::string format = "auto";      // "text", "jsonl", or "auto": by each file's extension
  std::string field = "text";       // jsonl: the field holding a document's text
  std::string split = "blank";      // text: a document per "blank"-line-separated block, "line" or "file"
  std::string sentencepiece;        // a SentencePiece model; empty: the byte tokenizer
  std::string layout = "indexed";   // "indexed" (Megatron .bin + .idx) or "flat" (nanoGPT)
  std::string dtype = "auto";       // uint16 when the vocabulary fits, else int32 (flat: uint32)
  int64_t eod = -1;                 // a token appended to every document; -1: none
  double validation = 0.001;        // the share of documents held out (chosen by index hash)
  uint64_t shardTokens = 1000000000;  // a new shard once one holds this many tokens
  int threads = 0;                  // 0: every core
  bool progress = true;             // a progress bar on stderr when it is a terminal
};

// "100M", "1G", "5000": a count with an optional K, M or G (powers of 1000). Throws skytrain::Error.
uint64_t parseCount(const std::string& text);

// Writes the shards and skytrain-tokens.json; prints the summary. Returns the exit status;
// throws skytrain::Error naming the file (and line) that cannot be read or parsed.
int prepareData(const PrepareOptions& options);

}  // namespace skytrain::client
