// ObjectReader: reads one JSON object field by field, tracking the JSON path, so every
// validation error names the exact field ("$.stages[1].layers") and the bad value.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace skytrain::protocol {

// Parses text as JSON; refuses inputs over maxBytes or nested deeper than maxDepth with
// skytrain::SpecError at path "$", and a key given twice in one object at its own path.
nlohmann::json parseBoundedJson(const std::string& text, size_t maxBytes, int maxDepth);

// Short rendering of a JSON value for error messages; always valid UTF-8.
std::string describe(const nlohmann::json& value);

// The candidate nearest to `word` by edit distance, if it is near enough to be a typo of it
// (at most a third of its letters wrong, and at most 3); "" otherwise. For "did you mean".
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// While one lives, every field a reader on this thread looks up, present or not, is added
// to `paths` ("$.model.kind"): how the docs' field reference is checked against the parser.
class FieldObserver {
 public:
  explicit FieldObserver(std::set<std::string>& paths);
  ~FieldObserver();
  FieldObserver(const FieldObserver&) = delete;
  FieldObserver& operator=(const FieldObserver&) = delete;

 private:
  std::set<std::string>* previous_;
};

class ObjectReader {
 public:
  // Throws SpecError when value is not an object.
  ObjectReader(const nlohmann::json& value, std::string path);

  const std::string& path() const { return path_; }
  std::string pathOf(const std::string& key) const { return path_ + "." + key; }
  bool has(const std::string& key) const;

  // Each getter marks the key as read. A missing optional key yields the default;
  // a present key of the wrong type or out of range throws SpecError.
  int64_t integer(const std::string& key, std::optional<int64_t> fallback, int64_t min, int64_t max);
  double number(const std::string& key, std::optional<double> fallback, double min, double max);
  std::string string(const std::string& key, std::optional<std::string> fallback);
  // string(), refused when longer than `max` bytes.
  std::string boundedString(const std::string& key, std::optional<std::string> fallback, size_t max);
  bool boolean(const std::string& key, std::optional<bool> fallback);
  std::vector<std::string> strings(const std::string& key, std::optional<std::vector<std::string>> fallback);
  // The raw value of a key (marked read), or nullptr if absent and optional.
  const nlohmann::json* child(const std::string& key, bool required);

  // Throws SpecError naming the first key no getter asked for.
  void finish() const;

 private:
  const nlohmann::json* lookup(const std::string& key, bool required);

  const nlohmann::json& value_;
  std::string path_;
  std::set<std::string> read_;
};

}  // namespace skytrain::protocol
