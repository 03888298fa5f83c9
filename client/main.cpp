// skytrain: the command-line client of skytraind.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>

#include "client/commands.h"
#include "client/data_prepare.h"
#include "client/export/export.h"
#include "client/export/hf_export.h"
#include "daemon/protocol/json_reader.h"
#include "daemon/protocol/keys.h"

namespace {

constexpr int kUsage = 2;  // a usage error, as getopt-style tools exit

// "skytrain sumbit job.json": the first word that is not an option (nor a global option's
// value) and names no command. CLI11 would say only "A subcommand is required".
int unknownCommand(const CLI::App& app, int argc, char** argv) {
  static const std::set<std::string> kTakesValue = {"-k", "--key", "--daemon-key", "--known-daemons",
                                                    "-d", "--daemon", "--timeout-ms"};
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") return 0;
    if (!word.empty() && word[0] == '-') {
      if (kTakesValue.count(word)) ++i;
      continue;
    }
    if (std::find(names.begin(), names.end(), word) != names.end()) return 0;
    const std::string near = skytrain::protocol::nearest(word, names);
    std::cerr << "error: \"" << word << "\" is not a skytrain command" << (near.empty() ? "" : "; did you mean \"" + near + "\"?")
              << "\nrun `skytrain --help` for the commands\n";
    return kUsage;
  }
  return 0;
}

// After a usage error: "did you mean" for the first word that names no option or command
// where it stands ("skytrain data prepar", "skytrain list --stat"). Top-level commands are
// unknownCommand's.
void suggestNear(CLI::App& app, int argc, char** argv) {
  CLI::App* at = &app;
  std::vector<CLI::App*> chain{&app};
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") return;
    if (word.size() > 1 && word[0] == '-') {
      if (skytrain::protocol::isZ85Key(word)) {  // one key in 85 starts with '-'
        std::cerr << "\"" << word << "\" is a public key starting with '-', which reads as an option: "
                  << "give it after \"--\" (skytrain " << at->get_name() << " [OPTIONS] -- KEY) or as @FILE\n";
        return;
      }
      const std::string name = word.substr(0, word.find('='));
      const CLI::Option* found = nullptr;
      for (auto* each : chain) found = found ? found : each->get_option_no_throw(name);
      if (found) {
        if (found->get_items_expected_min() > 0 && word.find('=') == std::string::npos) ++i;  // its value
        continue;
      }
      std::vector<std::string> names;
      for (auto* each : chain) {
        for (const auto* option : each->get_options()) {
          for (const auto& n : option->get_lnames()) names.push_back("--" + n);
        }
      }
      if (const std::string near = skytrain::protocol::nearest(name, names); !near.empty()) {
        std::cerr << "did you mean \"" << near << "\"?\n";
      }
      return;
    }
    std::vector<std::string> commands;
    for (const auto* sub : at->get_subcommands([](const CLI::App*) { return true; })) commands.push_back(sub->get_name());
    if (commands.empty()) continue;  // a positional argument
    if (std::find(commands.begin(), commands.end(), word) != commands.end()) {
      at = at->get_subcommand(word);
      chain.push_back(at);
      continue;
    }
    if (const std::string near = skytrain::protocol::nearest(word, commands); !near.empty()) {
      std::cerr << "did you mean \"" << at->get_name() << " " << near << "\"?\n";
    }
    return;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"skytrain: submit and manage training jobs on skytraind daemons"};
  app.set_version_flag("--version", std::string("skytrain ") + SKYTRAIN_VERSION);
  app.require_subcommand(1);
  skytrain::client::ClientOptions options;
  if (const char* env = std::getenv("SKYTRAIN_DAEMON"); env && *env) options.daemon = env;  // empty: unset
  int timeoutMs = 5000;
  skytrain::client::IdentityOptions identity;
  app.add_option("-k,--key", identity.keyFile, "your secret key file (env SKYTRAIN_KEY; default ~/.config/skytrain/client.key)");
  app.add_option("--daemon-key", identity.daemonKey, "the daemon's public key (env SKYTRAIN_DAEMON_KEY; default: known daemons)");
  app.add_option("--known-daemons", identity.knownDaemons,
                 "file of \"<endpoint> <public key>\" lines (env SKYTRAIN_KNOWN_DAEMONS; default ~/.config/skytrain/known_daemons)");
  app.add_flag("--insecure", identity.insecure, "plaintext, no keys: for an insecure daemon on loopback");
  app.add_option("-d,--daemon", options.daemon, "control endpoint of the daemon (env SKYTRAIN_DAEMON)")
      ->capture_default_str();
  app.add_option("--timeout-ms", timeoutMs, "per-request timeout")->capture_default_str()->check(CLI::Range(1, 3600000));

  std::string spec, job;
  bool detach = false, json = false;
  auto* submit = app.add_subcommand("submit", "submit a job spec; streams progress until it ends");
  submit->add_option("spec", spec, "job spec (JSON file)")->required();
  submit->add_flag("--detach", detach, "return once the job is accepted");
  submit->add_flag("--json", options.json, "progress as JSON lines (plan, event, step, eval, summary)");
  submit->add_flag("--cancel-on-interrupt", options.cancelOnInterrupt,
                   "Ctrl-C cancels the job (by default the job keeps running and the CLI detaches)");
  auto* status = app.add_subcommand("status", "show a job's state and metrics");
  status->add_option("job", job, "job id")->required();
  status->add_flag("--json", json, "print the full status as JSON");
  auto* plan = app.add_subcommand("plan", "dry run: profile the stages and links, print the plan, train nothing");
  plan->add_option("spec", spec, "job spec (JSON file)")->required();
  auto* validate = app.add_subcommand("validate", "check a job spec offline, with the daemons' own parser");
  validate->add_option("spec", spec, "job spec (JSON file)")->required();
  skytrain::client::ListOptions listOptions;
  auto* list = app.add_subcommand("list", "list your jobs on this daemon, newest first (an admin sees all)");
  list->add_flag("--json", listOptions.json, "print the jobs as a JSON array");
  list->add_option("--state", listOptions.state, "only jobs in this state")
      ->check(CLI::IsMember({"preparing", "running", "succeeded", "failed", "cancelled"}));
  auto* cancel = app.add_subcommand("cancel", "cancel a job (idempotent)");
  cancel->add_option("job", job, "job id")->required();
  bool follow = false;
  auto* logs = app.add_subcommand("logs", "print a job's steps and events; -f follows it to the end");
  logs->add_option("job", job, "job id")->required();
  logs->add_flag("-f,--follow", follow, "stream until the job ends (re-attaches after a daemon restart)");
  logs->add_flag("--json", options.json, "JSON lines, each with \"type\": plan, event, step, eval (and summary with -f)");
  std::vector<std::string> jobs;
  std::string out, axis = "step";
  auto* plot = app.add_subcommand("plot", "draw jobs' loss, throughput and bytes per step as one SVG");
  plot->add_option("jobs", jobs, "job ids (several: compared on the same axes)")->required();
  plot->add_option("-o,--output", out, "the SVG file to write")->required();
  plot->add_option("--x", axis, "horizontal axis: step or time (wall-clock seconds)")
      ->check(CLI::IsMember({"step", "time"}))
      ->capture_default_str();
  size_t probeBytes = 1 << 20;
  auto* probe = app.add_subcommand("probe", "measure bandwidth, round trip and per-message overhead to a daemon's data port");
  probe->add_option("endpoint", options.daemon, "the daemon's control endpoint (default: --daemon)");
  probe->add_flag("--json", options.json, "print the figures as JSON");
  probe->add_option("--bytes", probeBytes, "the middle probe frame's payload (the large one is 3x)")->capture_default_str()->check(CLI::Range(4096, 1 << 28));
  skytrain::client::PrepareOptions prepare;
  std::string shardTokens = "1G";
  auto* data = app.add_subcommand("data", "prepare corpora for data.format \"tokens\"");
  auto* prepareCmd = data->add_subcommand("prepare", "tokenise text or JSONL into token shards, on every core");
  data->require_subcommand(1);
  prepareCmd->add_option("inputs", prepare.inputs, "text or JSONL files, in order")->required();
  prepareCmd->add_option("-o,--output", prepare.output, "the directory to write (new or empty)")->required();
  prepareCmd->add_option("--format", prepare.format, "text, jsonl, or auto (.jsonl/.ndjson files are JSONL)")
      ->check(CLI::IsMember({"auto", "text", "jsonl"}))->capture_default_str();
  prepareCmd->add_option("--field", prepare.field, "jsonl: the field holding each document")->capture_default_str();
  prepareCmd->add_option("--split", prepare.split, "text: a document per blank-line-separated block, line, or file")
      ->check(CLI::IsMember({"blank", "line", "file"}))->capture_default_str();
  prepareCmd->add_option("--sentencepiece", prepare.sentencepiece, "a SentencePiece model (default: the byte tokenizer)");
  prepareCmd->add_option("--layout", prepare.layout, "indexed (Megatron .bin + .idx) or flat (nanoGPT)")
      ->check(CLI::IsMember({"indexed", "flat"}))->capture_default_str();
  prepareCmd->add_option("--dtype", prepare.dtype, "auto, uint16, int32 or uint32 (flat)")
      ->check(CLI::IsMember({"auto", "uint16", "int32", "uint32"}))->capture_default_str();
  prepareCmd->add_option("--eod", prepare.eod, "a token id appended to every document (default: none)");
  prepareCmd->add_option("--validation", prepare.validation, "the share of documents held out for validation")
      ->check(CLI::Range(0.0, 0.5))->capture_default_str();
  prepareCmd->add_option("--shard-tokens", shardTokens, "tokens per shard (1G, 100M, or a number)")->capture_default_str();
  prepareCmd->add_option("-j,--threads", prepare.threads, "tokeniser threads (default: every core)")->check(CLI::Range(0, 1024));
  prepareCmd->add_flag("!--no-progress", prepare.progress, "no progress bar");
  int64_t exportStep = -1;
  auto* exportCmd = app.add_subcommand("export", "write a job's weights, merged from every stage, as one safetensors file or a Hugging Face model directory");
  exportCmd->add_option("job", job, "job id")->required();
  exportCmd->add_option("-o,--output", out, "the .safetensors file to write (--format hf: the new directory)")->required();
  exportCmd->add_option("--step", exportStep, "the weights after step N (a complete checkpoint; see status) instead of the final ones")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  std::string exportFormat = "safetensors", shardSize = "5GB";
  exportCmd->add_option("--format", exportFormat, "safetensors (one file, skytrain names) or hf (a Hugging Face model directory)")
      ->check(CLI::IsMember({"safetensors", "hf"}))
      ->capture_default_str();
  exportCmd->add_option("--shard-size", shardSize, "hf: the largest shard (5GB, 500MB, 2GiB or bytes)")->capture_default_str();
  auto* resume = app.add_subcommand("resume", "restart a failed or cancelled job from its last complete checkpoint");
  resume->add_option("job", job, "job id")->required();
  resume->add_flag("--detach", detach, "return once the job is resumed");
  resume->add_flag("--cancel-on-interrupt", options.cancelOnInterrupt, "Ctrl-C cancels the job (else it keeps running)");
  std::string keyName, keyDir = ".", role = "client";
  auto* keygen = app.add_subcommand("keygen", "write a CURVE key pair: NAME.key (secret, mode 0600) and NAME.pub");
  keygen->add_option("name", keyName, "key name (A-Z a-z 0-9 . _ -)")->required();
  keygen->add_option("--dir", keyDir, "where to write the files (created, mode 0700, if missing)")->capture_default_str();
  keygen->add_option("--role", role, "what the key is for: client, admin or daemon (sets the hints it prints)")
      ->check(CLI::IsMember({"client", "admin", "daemon"}))->capture_default_str();
  std::string publicKey, keyOwner, keysFile = "/etc/skytrain/authorized_keys";
  auto* authorize = app.add_subcommand("authorize", "admit a public key: add \"<key> <role> <name>\" to a daemon's authorized_keys");
  authorize->add_option("key", publicKey, "the public key, @FILE or a NAME.pub path")->required();
  authorize->add_option("--role", role, "daemon, client or admin")->required()
      ->check(CLI::IsMember({"client", "admin", "daemon"}));
  authorize->add_option("--name", keyOwner, "the name logs give it (default: the name in the .pub file)");
  authorize->add_option("--file", keysFile, "the authorized_keys file (created if missing)")->capture_default_str();
  std::string endpoint, knownFile;
  auto* trust = app.add_subcommand("trust", "know a daemon by its endpoint: set \"<endpoint> <key>\" in a known_daemons file");
  trust->add_option("endpoint", endpoint, "the daemon's control endpoint, tcp://HOST:PORT")->required();
  trust->add_option("key", publicKey, "its public key, @FILE or a NAME.pub path")->required();
  trust->add_option("--file", knownFile, "the known_daemons file (default $SKYTRAIN_KNOWN_DAEMONS, else "
                                         "$XDG_CONFIG_HOME/skytrain/known_daemons or ~/.config/skytrain/known_daemons)");
  if (const int code = unknownCommand(app, argc, argv)) return code;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and a pointer to --help
    suggestNear(app, argc, argv);
    return kUsage;
  }
  options.timeout = std::chrono::milliseconds(timeoutMs);

  namespace client = skytrain::client;
  if (*keygen) return client::keygen(keyName, keyDir, role);
  if (*authorize) return client::authorize(publicKey, role, keyOwner, keysFile);
  if (*trust) return client::trust(endpoint, publicKey, knownFile);
  if (*validate) return client::validate(spec);
  if (*prepareCmd) {
    try {
      prepare.shardTokens = client::parseCount(shardTokens);
      return client::prepareData(prepare);
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    }
  }
  try {
    options.security = client::resolveSecurity(identity, options.daemon);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  try {  // job ids may be given by a unique prefix, as git takes commits
    if (!job.empty()) job = client::resolveJob(options, job);
    for (auto& j : jobs) j = client::resolveJob(options, j);
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  if (*submit) return client::submit(options, spec, detach);
  if (*status) return client::status(options, job, json);
  if (*plan) return client::plan(options, spec);
  if (*list) return client::list(options, listOptions);
  if (*cancel) return client::cancel(options, job);
  if (*logs) return client::logs(options, job, follow);
  if (*resume) return client::resume(options, job, detach);
  if (*plot) {
    client::PlotOptions plotOptions;
    plotOptions.x = axis == "time" ? client::PlotAxis::WallClock : client::PlotAxis::Step;
    return client::plot(options, jobs, out, plotOptions);
  }
  if (*probe) return client::probe(options, probeBytes);
  if (*exportCmd) {
    client::ExportOptions exportOptions;
    exportOptions.step = exportStep;
    exportOptions.format = exportFormat;
    try {
      exportOptions.shardBytes = client::parseByteSize(shardSize);
    } catch (const std::exception& e) {
      std::cerr << "error: --shard-size: " << e.what() << "\n";
      return 2;
    }
    return client::exportWeights(options, job, out, exportOptions);
  }
  return 2;
}
