#include "daemon/protocol/keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <vector>

#include "scheduler/error.h"

namespace skytrain::protocol {
namespace {

// The lines of a key file with comments and blank lines removed, each split into words,
// with its 1-based line number.
std::vector<std::pair<int, std::vector<std::string>>> wordLines(const std::string& text) {
  std::vector<std::pair<int, std::vector<std::string>>> out;
  std::istringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    // Only whole lines are comments: '#' is a Z85 digit, so it may appear inside a key.
    if (const auto first = line.find_first_not_of(" \t"); first != std::string::npos && line[first] == '#') continue;
    std::istringstream words(line);
    std::vector<std::string> parts;
    for (std::string w; words >> w;) parts.push_back(w);
    if (!parts.empty()) out.emplace_back(number, std::move(parts));
  }
  return out;
}

[[noreturn]] void bad(const std::string& source, int line, const std::string& problem) {
  throw Error(source + ":" + std::to_string(line) + ": " + problem);
}

bool validName(const std::string& name) {
  return !name.empty() && name.size() <= 64 &&
         name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
             std::string::npos &&
         name[0] != '.';
}

std::string publicOf(const std::string& secret) {
  char out[kZ85KeyLength + 1] = {};
  if (zmq_curve_public(out, secret.c_str()) != 0) throw Error("CURVE is not available in this libzmq");
  return out;
}

// Creates dir (and its parents) if missing; a folder it creates is mode 0700 (it holds a
// secret key).
void makePrivateDir(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create the folder \"" + dir + "\": " + ec.message());
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
}

void makeParentDir(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (parent.empty() || std::filesystem::is_directory(parent, ec)) return;
  std::filesystem::create_directories(parent, ec);
  if (ec) throw Error("cannot create the folder \"" + parent.string() + "\": " + ec.message());
}

// Writes text to `path` (through a symlink, to its target) by a fresh temporary file beside
// it and a rename: O_EXCL and O_NOFOLLOW, so a planted link cannot redirect the write; an
// existing file keeps its mode, a new one gets `mode`.
void replaceFile(const std::string& requested, const std::string& text, mode_t mode) {
  makeParentDir(requested);
  std::error_code ec;
  const std::string path = std::filesystem::is_symlink(requested, ec)
                               ? std::filesystem::weakly_canonical(requested, ec).string()
                               : requested;
  struct stat existing {};
  if (::stat(path.c_str(), &existing) == 0) mode = existing.st_mode & 07777;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) throw Error("cannot write \"" + tmp + "\": " + std::strerror(errno));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fchmod(fd, mode) == 0 &&
                  ::fsync(fd) == 0;
  const int writeErrno = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int why = ok ? errno : writeErrno;
    ::unlink(tmp.c_str());
    throw Error("cannot write \"" + path + "\": " + std::strerror(why));
  }
}

std::string existingText(const std::string& path, const std::string& what) {
  if (::access(path.c_str(), F_OK) != 0) return "";
  std::string text = readBoundedFile(path, kMaxKeyFileBytes, what);
  if (!text.empty() && text.back() != '\n') text += '\n';
  return text;
}

}  // namespace

std::optional<Role> parseRole(const std::string& text) {
  if (text == "daemon") return Role::Daemon;
  if (text == "client") return Role::Client;
  if (text == "admin") return Role::Admin;
  return std::nullopt;
}

std::string toString(Role role) {
  switch (role) {
    case Role::Daemon: return "daemon";
    case Role::Client: return "client";
    case Role::Admin: return "admin";
  }
  return "unknown";
}

bool isZ85Key(const std::string& text) {
  static const std::string kAlphabet =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  // zmq_z85_decode stops at a NUL, so every character is checked here first.
  if (text.size() != kZ85KeyLength || text.find_first_not_of(kAlphabet) != std::string::npos) return false;
  uint8_t bytes[32];
  return zmq_z85_decode(bytes, text.c_str()) != nullptr;
}

KeyPair generateKeyPair(const std::string& name) {
  if (!validName(name)) throw Error("key name \"" + name + "\" must be 1-64 of A-Z a-z 0-9 . _ - (not starting with .)");
  char publicKey[kZ85KeyLength + 1] = {}, secretKey[kZ85KeyLength + 1] = {};
  if (zmq_curve_keypair(publicKey, secretKey) != 0) {
    throw Error(std::string("cannot make a CURVE key pair: ") + zmq_strerror(zmq_errno()));
  }
  return {name, publicKey, secretKey};
}

std::string writeKeyPair(const KeyPair& keys, const std::string& dir) {
  if (!validName(keys.name)) throw Error("key name \"" + keys.name + "\" is not valid");
  const std::string secretPath = dir + "/" + keys.name + ".key";
  const std::string publicPath = dir + "/" + keys.name + ".pub";
  const std::string secretText = "# skytrain CURVE secret key: keep it private\nname " + keys.name + "\npublic " +
                                 keys.publicKey + "\nsecret " + keys.secretKey + "\n";
  const std::string publicText = keys.publicKey + " " + keys.name + "\n";
  auto write = [](const std::string& path, const std::string& text, mode_t mode) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
      throw Error("cannot create \"" + path + "\": " + std::strerror(errno) +
                  (errno == EEXIST ? " (refusing to overwrite a key)" : ""));
    }
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
    const std::string reason = ok ? "" : std::strerror(errno);
    ::close(fd);
    if (!ok) throw Error("cannot write \"" + path + "\": " + reason);
  };
  if (::access(publicPath.c_str(), F_OK) == 0) throw Error("\"" + publicPath + "\" exists (refusing to overwrite a key)");
  makePrivateDir(dir);
  write(secretPath, secretText, 0600);
  write(publicPath, publicText, 0644);
  return secretPath;
}

std::string readBoundedFile(const std::string& path, size_t maxBytes, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(what + " \"" + path + "\" cannot be opened: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(what + " \"" + path + "\" is not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > maxBytes) {
    ::close(fd);
    throw Error(what + " \"" + path + "\" is " + std::to_string(st.st_size) + " bytes, the limit is " +
                std::to_string(maxBytes));
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(done);
  return text;
}

KeyPair parseKeyPair(const std::string& text, const std::string& source) {
  KeyPair keys;
  for (const auto& [line, words] : wordLines(text)) {
    if (words.size() != 2) bad(source, line, "expected \"name|public|secret VALUE\"");
    std::string* field = words[0] == "name" ? &keys.name : words[0] == "public" ? &keys.publicKey
                                         : words[0] == "secret" ? &keys.secretKey : nullptr;
    if (!field) bad(source, line, "unknown field (expected name, public or secret)");
    if (!field->empty()) bad(source, line, "field \"" + words[0] + "\" given twice");
    *field = words[1];
  }
  if (keys.secretKey.empty()) throw Error(source + ": no \"secret\" line: not a skytrain secret key file");
  if (!isZ85Key(keys.secretKey)) throw Error(source + ": the secret key is not a 40-character Z85 key");
  const std::string derived = publicOf(keys.secretKey);
  if (!keys.publicKey.empty() && keys.publicKey != derived) {
    throw Error(source + ": the public key does not belong to the secret key");
  }
  keys.publicKey = derived;
  if (keys.name.empty()) keys.name = "unnamed";
  if (!validName(keys.name)) throw Error(source + ": key name is not valid");
  return keys;
}

KeyPair loadKeyPair(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error("secret key file \"" + path + "\": " + std::strerror(errno));
  const std::string text = readBoundedFile(path, kMaxKeyFileBytes, "secret key file");
  // A NAME.pub given where the secret NAME.key belongs: say so, not "chmod 600 it".
  const auto lines = wordLines(text);
  if (!lines.empty() && isZ85Key(lines[0].second[0]) && lines[0].second.size() <= 2) {
    throw Error("\"" + path + "\" is a public key file; give the secret key file (NAME.key, made by `skytrain keygen` "
                "next to NAME.pub)");
  }
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw Error("secret key file \"" + path + "\" has mode " + mode +
                ": readable by others; chmod 600 it (the key must stay private)");
  }
  return parseKeyPair(text, path);
}

AuthorizedKeys parseAuthorizedKeys(const std::string& text, const std::string& source) {
  AuthorizedKeys keys;
  for (const auto& [line, words] : wordLines(text)) {
    if (words.size() != 3) bad(source, line, "expected \"<public key> <role> <name>\"");
    if (!isZ85Key(words[0])) bad(source, line, "\"" + words[0].substr(0, 48) + "\" is not a 40-character Z85 public key");
    const auto role = parseRole(words[1]);
    if (!role) bad(source, line, "role \"" + words[1].substr(0, 32) + "\" is unknown (valid: daemon, client, admin)");
    if (!validName(words[2])) bad(source, line, "name must be 1-64 of A-Z a-z 0-9 . _ -");
    if (keys.count(words[0])) bad(source, line, "key listed twice");
    keys[words[0]] = {words[0], *role, words[2]};
  }
  return keys;
}

KnownDaemons parseKnownDaemons(const std::string& text, const std::string& source) {
  KnownDaemons daemons;
  for (const auto& [line, words] : wordLines(text)) {
    if (words.size() != 2) bad(source, line, "expected \"<control endpoint> <public key>\"");
    if (words[0].rfind("tcp://", 0) != 0 && words[0].rfind("ipc://", 0) != 0) {
      bad(source, line, "\"" + words[0].substr(0, 64) + "\" is not a tcp:// or ipc:// endpoint");
    }
    if (!isZ85Key(words[1])) bad(source, line, "not a 40-character Z85 public key");
    if (daemons.count(words[0])) bad(source, line, "endpoint listed twice");
    daemons[words[0]] = words[1];
  }
  return daemons;
}

AuthorizedKeys loadAuthorizedKeys(const std::string& path) {
  return parseAuthorizedKeys(readBoundedFile(path, kMaxKeyFileBytes, "authorized keys file"), path);
}

KnownDaemons loadKnownDaemons(const std::string& path) {
  if (path.empty() || ::access(path.c_str(), F_OK) != 0) return {};
  return parseKnownDaemons(readBoundedFile(path, kMaxKeyFileBytes, "known daemons file"), path);
}

std::string publicKeyArgument(const std::string& argument, std::string* name) {
  if (name) name->clear();
  if (argument.empty()) throw Error("an empty public key");
  // A key first: '@' is a Z85 character, so one key in 85 starts with it ("@FILE" would
  // otherwise read a file named after the key's other 39 characters).
  if (isZ85Key(argument)) return argument;
  const bool fromFile = argument[0] == '@';
  const std::string path = fromFile ? argument.substr(1) : argument;
  if (!fromFile && ::access(path.c_str(), F_OK) != 0) {
    throw Error("\"" + argument.substr(0, 64) + "\" is neither a 40-character Z85 public key nor a file: " +
                std::strerror(errno) + " (a key from a file: @FILE)");
  }
  const auto lines = wordLines(readBoundedFile(path, kMaxKeyFileBytes, "public key file"));
  if (lines.empty()) throw Error("public key file \"" + path + "\" holds no key");
  const auto& words = lines[0].second;
  if (words[0] == "name" || words[0] == "public" || words[0] == "secret") {
    throw Error("\"" + path + "\" is a secret key file: give its NAME.pub (a secret key never leaves its host)");
  }
  if (lines.size() != 1 || words.size() > 2 || !isZ85Key(words[0])) {
    throw Error("public key file \"" + path + "\" is not \"<40-character Z85 public key> [NAME]\" on one line");
  }
  if (name && words.size() == 2) *name = words[1];
  return words[0];
}

std::string userConfigPath(const std::string& file) {
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg == '/') return std::string(xdg) + "/skytrain/" + file;
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.config/skytrain/" + file;
  return "";
}

bool authorizeKey(const std::string& path, const AuthorizedKey& key) {
  if (!isZ85Key(key.publicKey)) throw Error("not a 40-character Z85 public key");
  if (!validName(key.name)) throw Error("name \"" + key.name + "\" must be 1-64 of A-Z a-z 0-9 . _ - (not starting with .)");
  std::string text = existingText(path, "authorized keys file");
  const AuthorizedKeys keys = parseAuthorizedKeys(text, path);
  if (auto it = keys.find(key.publicKey); it != keys.end()) {
    if (it->second.role == key.role && it->second.name == key.name) return false;
    throw Error(path + " already lists this key as \"" + it->second.name + "\" with role " + toString(it->second.role) +
                "; edit that line to change it");
  }
  text += key.publicKey + " " + toString(key.role) + " " + key.name + "\n";
  replaceFile(path, text, 0644);
  return true;
}

std::string trustDaemon(const std::string& path, const std::string& endpoint, const std::string& key) {
  if (!isZ85Key(key)) throw Error("not a 40-character Z85 public key");
  const std::string line = endpoint + " " + key;
  parseKnownDaemons(line, "the endpoint");  // the same checks as when it is read
  const std::string text = existingText(path, "known daemons file");
  const KnownDaemons known = parseKnownDaemons(text, path);
  std::string replaced, out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    std::istringstream words(l);
    std::string first;
    words >> first;
    if (first == endpoint) {
      replaced = known.at(endpoint);
      continue;
    }
    out += l + "\n";
  }
  replaceFile(path, out + line + "\n", 0644);
  return replaced;
}

bool isLoopbackEndpoint(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  std::string host = endpoint.substr(6);
  const auto colon = host.rfind(':');
  if (colon == std::string::npos) return false;
  host.resize(colon);
  if (host.find(';') != std::string::npos) return false;  // "source;destination" forms
  if (host == "[::1]" || host == "localhost") return true;
  if (host.rfind("127.", 0) != 0) return false;
  return host.find_first_not_of("0123456789.") == std::string::npos;
}

}  // namespace skytrain::protocol
