// CURVE identities: key pairs (skytrain keygen), the daemon's authorized keys and the
// clients' and daemons' known daemons. Shared by the daemon and the CLI (no Torch).
//
// Files (Z85 text; lines starting with '#' are comments, blank lines ignored):
//   NAME.key         "name NAME" / "public <key>" / "secret <key>" lines; mode 0600
//   NAME.pub         "<public key> NAME"
//   authorized_keys  "<public key> <role> <name>" per line; roles: daemon, client, admin
//   known_daemons    "<control endpoint> <public key>" per line
#pragma once

#include <map>
#include <optional>
#include <string>

namespace skytrain::protocol {

constexpr size_t kZ85KeyLength = 40;       // a 32-byte CURVE key in Z85
constexpr size_t kMaxKeyFileBytes = 1 << 20;  // any key file larger than this is refused

struct KeyPair {
  std::string name;
  std::string publicKey;  // Z85
  std::string secretKey;  // Z85
};

enum class Role { Daemon, Client, Admin };
std::string toString(Role role);
std::optional<Role> parseRole(const std::string& text);

struct AuthorizedKey {
  std::string publicKey;
  Role role = Role::Client;
  std::string name;
};

// Public key -> its entry.
using AuthorizedKeys = std::map<std::string, AuthorizedKey>;
// Control endpoint -> the daemon's public key.
using KnownDaemons = std::map<std::string, std::string>;

// True for 40 characters of the Z85 alphabet that decode to 32 bytes.
bool isZ85Key(const std::string& text);

// A fresh CURVE key pair. Throws skytrain::Error if libzmq lacks CURVE.
KeyPair generateKeyPair(const std::string& name);

// Writes DIR/NAME.key (mode 0600, refused if it exists) and DIR/NAME.pub; returns the
// secret file's path. Throws skytrain::Error naming the file. Names: [A-Za-z0-9._-]{1,64}.
std::string writeKeyPair(const KeyPair& keys, const std::string& dir);

// Reads a secret key file. Refuses (skytrain::Error naming the path and the problem) a file
// that is missing, too large, readable by group or others, malformed, or whose public key
// does not match its secret key.
KeyPair loadKeyPair(const std::string& path);
KeyPair parseKeyPair(const std::string& text, const std::string& source);

// Parse authorized_keys / known_daemons text; errors name `source` and the line number.
AuthorizedKeys parseAuthorizedKeys(const std::string& text, const std::string& source);
KnownDaemons parseKnownDaemons(const std::string& text, const std::string& source);
// File versions; a missing known_daemons file is an empty list, a missing authorized_keys
// file is an error.
AuthorizedKeys loadAuthorizedKeys(const std::string& path);
KnownDaemons loadKnownDaemons(const std::string& path);

// A public key given on a command line: the 40-character Z85 key itself (also when it starts
// with '@', a Z85 character), "@FILE", or the path of a file (NAME.pub: "<public key> NAME";
// or a bare key). `name`, when given, is set
// to the name in the file (empty for a bare key). Throws skytrain::Error naming what is wrong.
std::string publicKeyArgument(const std::string& argument, std::string* name = nullptr);

// Where the CLI's own files live: $XDG_CONFIG_HOME/skytrain/FILE, else ~/.config/skytrain/FILE
// ("" when neither variable is set).
std::string userConfigPath(const std::string& file);

// Adds "<key> <role> <name>" to an authorized_keys file (created with its folder if missing,
// mode 0644): returns false if that exact line is there already; throws skytrain::Error if
// the key is listed with another role or name, or the file does not parse.
bool authorizeKey(const std::string& path, const AuthorizedKey& key);

// Sets "<endpoint> <key>" in a known_daemons file (created with its folder if missing):
// replaces the endpoint's line if it has one. Returns the key it replaced ("" if none).
std::string trustDaemon(const std::string& path, const std::string& endpoint, const std::string& key);

// Reads a whole file of at most maxBytes, refusing anything but a regular file.
std::string readBoundedFile(const std::string& path, size_t maxBytes, const std::string& what);

// True for endpoints that cannot leave this machine: tcp:// on 127.0.0.0/8, [::1] or
// localhost, and ipc:// / inproc://.
bool isLoopbackEndpoint(const std::string& endpoint);

}  // namespace skytrain::protocol
