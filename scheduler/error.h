// The one exception hierarchy of skytrain and its invariant-check macro.
// It lives in scheduler/ because that module depends on nothing, so every module can use it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace skytrain {

// Base of every recoverable failure (bad input, network, peer). Messages name the thing
// and the offending value.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A job spec or config value is invalid; `path()` is its JSON path, e.g. "$.stages[1].layers".
class SpecError : public Error {
 public:
  SpecError(std::string path, const std::string& message)
      : Error(path + ": " + message), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A frame, message or file on the wire or on disk is malformed.
class WireError : public Error {
 public:
  using Error::Error;
};

// A job's data cannot be read or does not fit it (too few tokens for a sequence, a token
// past the vocabulary): a restart would meet it again. The message starts "data: ".
class DataError : public Error {
 public:
  explicit DataError(const std::string& message) : Error("data: " + message) {}
};

// A peer (daemon, stage, client) could not be reached, timed out or reported a failure.
class PeerError : public Error {
 public:
  using Error::Error;
};

// A broken invariant: a bug in skytrain, never caused by input.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace skytrain

#define SKYTRAIN_CHECK(cond, msg)                                                   \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::ostringstream skytrainCheckStream_;                                      \
      skytrainCheckStream_ << __FILE__ << ":" << __LINE__ << ": check failed: "     \
                           << #cond << ": " << msg;                                  \
      throw ::skytrain::InternalError(skytrainCheckStream_.str());                  \
    }                                                                               \
  } while (0)
