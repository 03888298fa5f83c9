// Durable file writes for job records, metrics and stage weights.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace skytrain::daemon {

// Writes to path.tmp, fsyncs, renames over path, fsyncs the directory: a reader sees the
// old file or the new one, never a torn one. Throws skytrain::Error naming the path.
void writeFileAtomic(const std::string& path, const std::string& bytes);

// The same, the bytes handed over in pieces: `produce` calls its sink with each piece in
// order, so a large file (a checkpoint) is never held whole in memory.
using ByteSink = std::function<void(const char* data, size_t size)>;
void writeFileAtomic(const std::string& path, const std::function<void(const ByteSink&)>& produce);

// Appends one line and flushes it to disk. Throws skytrain::Error naming the path.
void appendLine(const std::string& path, const std::string& line);

// Creates a directory and its parents; throws skytrain::Error naming the path.
void makeDirectories(const std::string& path);

// The whole of a regular file of at most maxBytes. Throws skytrain::Error naming the path.
std::string readFile(const std::string& path, size_t maxBytes);

}  // namespace skytrain::daemon
