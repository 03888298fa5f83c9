// skytrain: the command-line client of skytraind.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>

#include "client/commands.h"
#include "client/data_prepare.h"
#include "client/export.h"
#include "client/hf_export.h"

int main(int argc, char** argv) {
  CLI::App app{"skytrain: submit and manage training jobs on skytraind daemons"};
  app.set_version_flag("--version", std::string("skytrain ") + SKYTRAIN_VERSION);
  app.require_subcommand(1);
  skytrain::client::ClientOptions options;
  if (const char* env = std::getenv("SKYTRAIN_DAEMON")) options.daemon = env;
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
  auto* status = app.add_subcommand("status", "show a job's state and metrics");
  status->add_option("job", job, "job id")->required();
  status->add_flag("--json", json, "print the full status as JSON");
  auto* plan = app.add_subcommand("plan", "dry run: profile the stages and links, print the plan, train nothing");
  plan->add_option("spec", spec, "job spec (JSON file)")->required();
  auto* list = app.add_subcommand("list", "list the jobs this daemon coordinates");
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
  exportCmd->add_option("--step", exportStep, "a complete checkpoint's step instead of the final weights")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  std::string exportFormat = "safetensors", shardSize = "5GB";
  exportCmd->add_option("--format", exportFormat, "safetensors (one file, skytrain names) or hf (a Hugging Face model directory)")
      ->check(CLI::IsMember({"safetensors", "hf"}))
      ->capture_default_str();
  exportCmd->add_option("--shard-size", shardSize, "hf: the largest shard (5GB, 500MB, 2GiB or bytes)")->capture_default_str();
  auto* resume = app.add_subcommand("resume", "restart a failed or cancelled job from its last complete checkpoint");
  resume->add_option("job", job, "job id")->required();
  resume->add_flag("--detach", detach, "return once the job is resumed");
  std::string keyName, keyDir = ".";
  auto* keygen = app.add_subcommand("keygen", "write a CURVE key pair: NAME.key (secret, mode 0600) and NAME.pub");
  keygen->add_option("name", keyName, "key name (A-Z a-z 0-9 . _ -)")->required();
  keygen->add_option("--dir", keyDir, "where to write the files")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  options.timeout = std::chrono::milliseconds(timeoutMs);

  namespace client = skytrain::client;
  if (*keygen) return client::keygen(keyName, keyDir);
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
  if (*submit) return client::submit(options, spec, detach);
  if (*status) return client::status(options, job, json);
  if (*plan) return client::plan(options, spec);
  if (*list) return client::list(options);
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
