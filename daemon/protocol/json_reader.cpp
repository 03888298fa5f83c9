#include "daemon/protocol/json_reader.h"

#include <algorithm>
#include <set>
#include <vector>

#include "scheduler/error.h"

namespace skytrain::protocol {

using nlohmann::json;

namespace {

// Tracks where the parser is, so a duplicate key is refused with its JSON path.
class PathTracker {
 public:
  explicit PathTracker(int maxDepth) : maxDepth_(maxDepth) {}

  bool onEvent(int depth, json::parse_event_t event, const json& parsed) {
    using E = json::parse_event_t;
    if (depth > maxDepth_) throw SpecError("$", "nested deeper than " + std::to_string(maxDepth_) + " levels");
    switch (event) {
      case E::object_start: frames_.push_back({false, 0, "", {}}); break;
      case E::array_start: frames_.push_back({true, 0, "", {}}); break;
      case E::key: {
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second) throw SpecError(path(), "duplicate key");
        break;
      }
      case E::object_end:
      case E::array_end:
        frames_.pop_back();
        elementDone();
        break;
      case E::value: elementDone(); break;
    }
    return true;
  }

 private:
  struct Frame {
    bool array;
    size_t index;
    std::string key;
    std::set<std::string> keys;
  };

  void elementDone() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }

  std::string path() const {
    std::string out = "$";
    for (const Frame& f : frames_) {
      out += f.array ? "[" + std::to_string(f.index) + "]" : "." + f.key;
    }
    return out;
  }

  int maxDepth_;
  std::vector<Frame> frames_;
};

}  // namespace

json parseBoundedJson(const std::string& text, size_t maxBytes, int maxDepth) {
  if (text.size() > maxBytes) {
    throw SpecError("$", "document is " + std::to_string(text.size()) + " bytes, the limit is " +
                             std::to_string(maxBytes));
  }
  PathTracker tracker(maxDepth);
  json::parser_callback_t callback = [&tracker](int depth, json::parse_event_t event, json& parsed) {
    return tracker.onEvent(depth, event, parsed);
  };
  try {
    return json::parse(text, callback);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers such as 1e999
    throw SpecError("$", std::string("not valid JSON: ") + e.what());
  }
}

std::string describe(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) {
    size_t cut = 57;
    // Never cut inside a UTF-8 sequence: back up over continuation bytes.
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return text;
}

ObjectReader::ObjectReader(const json& value, std::string path) : value_(value), path_(std::move(path)) {
  if (!value_.is_object()) throw SpecError(path_, "expected an object, got " + describe(value_));
}

namespace {
thread_local std::set<std::string>* observed = nullptr;
}  // namespace

bool ObjectReader::has(const std::string& key) const {
  if (observed) observed->insert(pathOf(key));  // asked about: a field the parser knows
  return value_.contains(key);
}

FieldObserver::FieldObserver(std::set<std::string>& paths) : previous_(observed) { observed = &paths; }
FieldObserver::~FieldObserver() { observed = previous_; }

const json* ObjectReader::lookup(const std::string& key, bool required) {
  read_.insert(key);
  if (observed) observed->insert(pathOf(key));
  auto it = value_.find(key);
  if (it == value_.end()) {
    if (required) throw SpecError(pathOf(key), "required field is missing");
    return nullptr;
  }
  return &*it;
}

const json* ObjectReader::child(const std::string& key, bool required) { return lookup(key, required); }

int64_t ObjectReader::integer(const std::string& key, std::optional<int64_t> fallback, int64_t min, int64_t max) {
  const json* v = lookup(key, !fallback);
  if (!v) return *fallback;
  if (!v->is_number_integer()) throw SpecError(pathOf(key), "expected an integer, got " + describe(*v));
  const bool isUnsigned = v->is_number_unsigned();
  const int64_t x = isUnsigned && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : v->get<int64_t>();
  if (x < min || x > max) {
    throw SpecError(pathOf(key), "value " + describe(*v) + " is out of range [" + std::to_string(min) +
                                     ", " + std::to_string(max) + "]");
  }
  return x;
}

double ObjectReader::number(const std::string& key, std::optional<double> fallback, double min, double max) {
  const json* v = lookup(key, !fallback);
  if (!v) return *fallback;
  if (!v->is_number()) throw SpecError(pathOf(key), "expected a number, got " + describe(*v));
  const double x = v->get<double>();
  if (!(x >= min && x <= max)) {
    throw SpecError(pathOf(key), "value " + describe(*v) + " is out of range [" + json(min).dump() + ", " +
                                     json(max).dump() + "]");
  }
  return x;
}

std::string ObjectReader::string(const std::string& key, std::optional<std::string> fallback) {
  const json* v = lookup(key, !fallback);
  if (!v) return *fallback;
  if (!v->is_string()) throw SpecError(pathOf(key), "expected a string, got " + describe(*v));
  return v->get<std::string>();
}

std::string ObjectReader::boundedString(const std::string& key, std::optional<std::string> fallback, size_t max) {
  std::string value = string(key, std::move(fallback));
  if (value.size() > max) {
    throw SpecError(pathOf(key), "is " + std::to_string(value.size()) + " bytes, the limit is " + std::to_string(max));
  }
  return value;
}

bool ObjectReader::boolean(const std::string& key, std::optional<bool> fallback) {
  const json* v = lookup(key, !fallback);
  if (!v) return *fallback;
  if (!v->is_boolean()) throw SpecError(pathOf(key), "expected true or false, got " + describe(*v));
  return v->get<bool>();
}

std::vector<std::string> ObjectReader::strings(const std::string& key,
                                               std::optional<std::vector<std::string>> fallback) {
  const json* v = lookup(key, !fallback);
  if (!v) return *fallback;
  if (!v->is_array()) throw SpecError(pathOf(key), "expected an array of strings, got " + describe(*v));
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      throw SpecError(pathOf(key) + "[" + std::to_string(i) + "]", "expected a string, got " + describe((*v)[i]));
    }
    out.push_back((*v)[i].get<std::string>());
  }
  return out;
}

void ObjectReader::finish() const {
  for (auto it = value_.begin(); it != value_.end(); ++it) {
    if (read_.count(it.key())) continue;
    const std::string near = nearest(it.key(), {read_.begin(), read_.end()});
    throw SpecError(pathOf(it.key()), near.empty() ? "unknown field" : "unknown field; did you mean \"" + near + "\"?");
  }
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.size() > 64) return "";
  std::string best;
  size_t bestDistance = std::min<size_t>(3, std::max<size_t>(1, word.size() / 3)) + 1;
  for (const auto& candidate : candidates) {
    if (candidate.size() > 64) continue;
    // Levenshtein distance with adjacent transpositions counted as one edit.
    const size_t n = word.size(), m = candidate.size();
    std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
    for (size_t i = 0; i <= n; ++i) d[i][0] = i;
    for (size_t j = 0; j <= m; ++j) d[0][j] = j;
    for (size_t i = 1; i <= n; ++i) {
      for (size_t j = 1; j <= m; ++j) {
        const size_t cost = word[i - 1] == candidate[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && word[i - 1] == candidate[j - 2] && word[i - 2] == candidate[j - 1]) {
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
      }
    }
    if (d[n][m] < bestDistance) {
      bestDistance = d[n][m];
      best = candidate;
    }
  }
  return best;
}

}  // namespace skytrain::protocol
