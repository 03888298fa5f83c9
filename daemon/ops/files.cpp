#include "daemon/ops/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw Error(what + " \"" + path + "\": " + std::strerror(errno));
}

void writeAll(int fd, const char* data, size_t size, const std::string& path) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot write", path);  // the caller closes fd
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void writeFileAtomic(const std::string& path, const std::string& bytes) {
  writeFileAtomic(path, [&](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

void writeFileAtomic(const std::string& path, const std::function<void(const ByteSink&)>& produce) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", tmp);
  try {
    produce([&](const char* data, size_t size) { writeAll(fd, data, size, tmp); });
    if (::fsync(fd) != 0) fail("cannot fsync", tmp);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());  // no partial file left behind (a full disk, a failed producer)
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    errno = error;
    fail("cannot rename onto", path);
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int dirFd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
}

void appendLine(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot open", path);
  const std::string text = line + "\n";
  try {
    writeAll(fd, text.data(), text.size(), path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::fdatasync(fd);
  ::close(fd);
}

void makeDirectories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw Error("cannot create directory \"" + path + "\": " + ec.message());
}

std::string readFile(const std::string& path, size_t maxBytes) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw Error(path + " is missing or not a regular file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec || size > maxBytes) throw Error(path + " is too large or unreadable");
  std::string bytes(size, '\0');
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open", path);
  const size_t got = std::fread(bytes.data(), 1, size, f);
  std::fclose(f);
  if (got != size) throw Error(path + ": short read");
  return bytes;
}

}  // namespace skytrain::daemon
