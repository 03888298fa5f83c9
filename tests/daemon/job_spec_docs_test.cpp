// docs/job-spec.md and docs/job-spec.schema.json cannot drift from the parser: every field
// the parser reads while parsing the shipped specs (deploy/jobs/*.json) and the page's own
// examples is a row of the page's reference and a property of the schema, every row names a
// field the parser reads, and every whole-spec example on the page and in the README parses.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "daemon/protocol/spec/job_spec.h"
#include "daemon/protocol/json_reader.h"

namespace fs = std::filesystem;
using skytrain::protocol::FieldObserver;
using skytrain::protocol::parseJobSpec;

namespace {

std::string readText(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// "$.stages[1].layers" -> "stages[i].layers", as the page writes a field.
std::string docPath(const std::string& path) {
  return std::regex_replace(path.substr(path.rfind("$.", 0) == 0 ? 2 : 0), std::regex(R"(\[\d+\])"), "[i]");
}

// The schema node of a field ("a.b[i].c"), or nullptr if the schema does not have it.
const nlohmann::json* schemaNode(const nlohmann::json& schema, const std::string& path) {
  const nlohmann::json* node = &schema;
  std::istringstream parts(path);
  for (std::string part; std::getline(parts, part, '.');) {
    bool array = false;
    if (part.size() > 3 && part.compare(part.size() - 3, 3, "[i]") == 0) {
      part.resize(part.size() - 3);
      array = true;
    }
    if (!node->contains("properties") || !(*node)["properties"].contains(part)) return nullptr;
    node = &(*node)["properties"][part];
    if (array) {
      if (!node->contains("items")) return nullptr;
      node = &(*node)["items"];
    }
  }
  return node;
}

}  // namespace

TEST_CASE("docs/job-spec.md and its schema list exactly the fields the parser reads", "[docs]") {
  const fs::path root = SKYTRAIN_SOURCE_DIR;
  const std::string page = readText(root / "docs" / "job-spec.md");
  std::set<std::string> rows;
  const std::regex row(R"(^\| `([A-Za-z0-9_.\[\]]+)` \|)", std::regex::multiline);
  for (auto it = std::sregex_iterator(page.begin(), page.end(), row); it != std::sregex_iterator(); ++it) {
    rows.insert((*it)[1]);
  }
  REQUIRE(rows.size() > 30);

  std::set<std::string> read;
  FieldObserver observer(read);
  size_t examples = 0;
  const std::regex block(R"(```json\n([\s\S]*?)```)");
  const std::string readme = readText(root / "README.md");
  for (const std::string* doc : {&page, &readme}) {
    for (auto it = std::sregex_iterator(doc->begin(), doc->end(), block); it != std::sregex_iterator(); ++it) {
      const std::string text = (*it)[1];
      const auto parsed = nlohmann::json::parse(text, nullptr, false);
      if (!parsed.is_object() || !parsed.contains("stages")) continue;  // a fragment, not a whole spec
      INFO("an example in " << (doc == &page ? "docs/job-spec.md" : "README.md") << ":\n" << text);
      CHECK_NOTHROW(parseJobSpec(text));
      ++examples;
    }
  }
  CHECK(examples >= 2);
  for (const auto& entry : fs::directory_iterator(root / "deploy" / "jobs")) {
    if (entry.path().extension() != ".json") continue;
    INFO(entry.path());
    CHECK_NOTHROW(parseJobSpec(readText(entry.path())));
  }
  std::set<std::string> fields;
  for (const auto& path : read) fields.insert(docPath(path));

  const auto schema = nlohmann::json::parse(readText(root / "docs" / "job-spec.schema.json"));
  for (const auto& field : fields) {
    INFO("the parser reads " << field);
    CHECK(rows.count(field));
    CHECK(schemaNode(schema, field) != nullptr);
  }
  for (const auto& documented : rows) {
    INFO("docs/job-spec.md documents " << documented << ", which the parser never read here");
    CHECK(fields.count(documented));
  }
}
