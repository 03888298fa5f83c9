// A fan-in over real daemons (issue: models and topologies): two ELECTRA generators, each
// with its own text, feed one discriminator token IDs and replaced flags; nothing flows
// back but an acknowledgement per step, and no generator runs further ahead than
// max_staleness.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "daemon_fixture.h"

using namespace skytrain;
using namespace skytrain::testing;
using Json = nlohmann::json;

namespace {

constexpr int kSteps = 12;
constexpr int kBatch = 8;
constexpr int kSeqLen = 16;

// The corpus cut in two: one "language" per generator.
std::pair<std::string, std::string> halves(const std::filesystem::path& dir) {
  std::ifstream in(SKYTRAIN_TEST_CORPUS, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  const auto first = (dir / "first.txt").string(), second = (dir / "second.txt").string();
  std::ofstream(first, std::ios::binary) << all.substr(0, all.size() / 2);
  std::ofstream(second, std::ios::binary) << all.substr(all.size() / 2);
  return {first, second};
}

Json electraSpec(const std::string& a, const std::string& b, const std::string& c, const std::pair<std::string, std::string>& text,
                 int staleness, const std::string& codec = "tokens") {
  return {{"name", "electra"},
          {"seed", 3},
          {"steps", kSteps},
          {"batch_size", kBatch},
          {"max_staleness", staleness},
          {"model",
           {{"kind", "electra"}, {"vocab_size", 257}, {"d_model", 32}, {"heads", 4}, {"layers", 2}, {"d_ff", 64},
            {"seq_len", kSeqLen}, {"generator", {{"d_model", 16}, {"heads", 2}, {"layers", 1}, {"d_ff", 32}}}}},
          {"data", {{"files", {SKYTRAIN_TEST_CORPUS}}}},
          {"optimizer", {{"lr", 2e-3}, {"clip_norm", 1.0}}},
          {"compression", {{"forward", codec}}},
          {"eval", {{"samples", 16}}},
          {"stages",
           {{{"daemon", a}, {"data_files", {text.first}}}, {{"daemon", c}, {"data_files", {text.second}}}, {{"daemon", b}}}}};
}

}  // namespace

TEST_CASE("two ELECTRA generators feed one discriminator over real daemons, within max_staleness",
          "[integration][fan-in]") {
  TestDaemon a("ga"), b("disc"), c("gc");
  zmq::context_t context;
  const auto text = halves(a.dir());
  const int staleness = GENERATE(0, 1, 2);
  CAPTURE(staleness);
  const Json status = runJob(context, b.control(), electraSpec(a.control(), b.control(), c.control(), text, staleness));
  INFO(status.dump().substr(0, 4000));
  REQUIRE(status["state"] == "succeeded");
  REQUIRE(status["steps"].size() == kSteps);
  int maxLead = -1;
  for (const auto& row : status["steps"]) {
    REQUIRE(row["stage_losses"].size() == 3);
    for (const auto& loss : row["stage_losses"]) CHECK(std::isfinite(loss.get<double>()));
    CHECK(row["lead"].get<int>() <= staleness);
    maxLead = std::max(maxLead, row["lead"].get<int>());
    // Only token IDs cross: per micro-batch a frame header, the width byte, one byte an ID
    // (the byte vocabulary) and a bit a flag, from each generator; and the acknowledgements.
    const int m = row["micro_batches"];
    const double tokenBytes = 2.0 * m * (1 + kBatch / m * kSeqLen + kBatch / m * kSeqLen / 8);
    CHECK(row["bytes_sent"].get<double>() >= tokenBytes);
    CHECK(row["bytes_sent"].get<double>() < tokenBytes + 2 * m * 200 + 2 * 200);
  }
  // The discriminator sees twice as much as a chain stage would, yet the generators keep
  // up within the bound: with any slack at all they use it.
  if (staleness > 0) CHECK(maxLead >= 1);
  const auto& first = status["steps"].front()["stage_losses"];
  const auto& last = status["steps"].back()["stage_losses"];
  CHECK(last[0].get<double>() < first[0].get<double>());  // the generators learn
  CHECK(last[1].get<double>() < first[1].get<double>());
  REQUIRE(status["evals"].size() == 1);
  CHECK(std::isfinite(status["evals"][0]["loss"].get<double>()));
  const Json& plan = status["plans"].back();
  CHECK(plan["schedule"] == "fan-in");
  CHECK(plan["links"].size() == 2);
}

TEST_CASE("fan-in specs: token links only, a discriminator without text", "[fan-in]") {
  TestDaemon a("sa"), b("sb"), c("sc");
  zmq::context_t context;
  const auto text = halves(a.dir());
  Json spec = electraSpec(a.control(), b.control(), c.control(), text, 1, "int8");
  protocol::ControlClient client(context, b.control(), protocol::ClientSecurity{});
  auto refused = [&](const Json& s, const std::string& needle) {
    try {
      client.request({{"type", "submit"}, {"spec", s.dump()}}, std::chrono::seconds(5));
      FAIL("accepted");
    } catch (const std::exception& e) {
      CHECK_THAT(e.what(), Catch::Contains(needle));
    }
  };
  refused(spec, "ELECTRA links carry token IDs");
  spec = electraSpec(a.control(), b.control(), c.control(), text, 1);
  spec["stages"][2]["data_files"] = {text.first};
  refused(spec, "the discriminator reads no text");
  spec = electraSpec(a.control(), b.control(), c.control(), text, 1);
  spec["update"] = "delayed";
  refused(spec, "only \"sync\"");
  spec = electraSpec(a.control(), b.control(), c.control(), text, 1);
  spec["stages"] = {spec["stages"][2]};
  refused(spec, "at least one generator");
  spec = electraSpec(a.control(), b.control(), c.control(), text, 1);
  spec["model"]["vocab_size"] = 256;  // no room for [MASK]
  const Json status = runJob(context, b.control(), spec);
  CHECK(status["state"] == "failed");
  CHECK_THAT(status["error"].get<std::string>(), Catch::Contains("plus the [MASK] token"));
}

TEST_CASE("a discriminator's checkpoint starts a classifier fine-tuned on labelled text, tested on other files",
          "[integration][fan-in]") {
  TestDaemon a("fa"), b("fb");
  zmq::context_t context;
  const auto text = halves(a.dir());
  // Pretrain: one generator, the discriminator; keep the discriminator's final checkpoint.
  Json pretrain = electraSpec(a.control(), b.control(), b.control(), text, 1);
  pretrain["stages"] = {{{"daemon", a.control()}, {"data_files", {text.first}}}, {{"daemon", b.control()}}};
  pretrain["steps"] = 4;
  const Json electra = runJob(context, b.control(), pretrain);
  REQUIRE(electra["state"] == "succeeded");
  const auto checkpoint = b.dir() / "jobs" / electra["id"].get<std::string>() / "checkpoints" / "step-00000004" / "stage-1.safetensors";
  REQUIRE(std::filesystem::exists(checkpoint));
  // Labelled text: whether a line of the corpus is long; train on one half, test on the other.
  auto labelled = [&](const std::string& from, const std::string& to) {
    std::ifstream in(from);
    std::ofstream out(to);
    std::string line;
    for (int n = 0; std::getline(in, line) && n < 400; ++n) {
      if (!line.empty()) out << (line.size() > 60 ? "long" : "short") << "\t" << line << "\n";
    }
    return to;
  };
  const std::string train = labelled(text.first, (a.dir() / "train.tsv").string());
  const std::string test = labelled(text.second, (a.dir() / "test.tsv").string());
  Json classify = {{"name", "classify"}, {"seed", 1}, {"steps", 6}, {"batch_size", 8}, {"micro_batches", 1},
                   {"schedule", "gpipe"},
                   {"model", {{"kind", "classifier"}, {"classes", {"short", "long"}}, {"vocab_size", 257}, {"d_model", 32},
                              {"heads", 4}, {"layers", 2}, {"d_ff", 64}, {"seq_len", kSeqLen},
                              {"init_from", checkpoint.string()}}},
                   {"data", {{"files", {train}}, {"eval_files", {test}}}},
                   {"optimizer", {{"lr", 1e-3}}},
                   {"eval", {{"samples", 64}}},
                   {"stages", {{{"daemon", b.control()}, {"layers", {0, 2}}}}}};
  const Json status = runJob(context, b.control(), classify);
  INFO(status.dump().substr(0, 3000));
  REQUIRE(status["state"] == "succeeded");
  const Json& init = status["plans"].back()["stages"][0]["init_from"][0];
  CHECK(init["from_seed"] == 2);  // the classifier head: weight and bias
  CHECK(init["loaded"].get<int>() > 10);  // embeddings, blocks, final norm: from the discriminator
  const double accuracy = status["summary"]["validation_accuracy"];
  CHECK(accuracy >= 0.0);
  CHECK(accuracy <= 1.0);
  // A label the spec does not list is refused with its file and line.
  std::ofstream(train, std::ios::app) << "medium\tnot a class\n";
  const Json bad = runJob(context, b.control(), classify);
  CHECK(bad["state"] == "failed");
  CHECK_THAT(bad["error"].get<std::string>(), Catch::Contains("train.tsv:") && Catch::Contains("\"medium\" is not in model.classes"));
}
