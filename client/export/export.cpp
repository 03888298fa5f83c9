#include "client/export/export.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "client/format.h"
#include "client/export/hf_export.h"
#include "client/probe.h"
#include "client/export/safetensors_merge.h"
#include "daemon/protocol/base64.h"
#include "daemon/protocol/spec/hf_layout.h"
#include "daemon/protocol/spec/job_spec.h"
#include "daemon/protocol/messages.h"
#include "scheduler/error.h"

namespace skytrain::client {
namespace {

using protocol::Json;

constexpr int64_t kAfterEveryStep = int64_t{1} << 30;  // `since` that returns no step rows
constexpr uint64_t kMaxStageWeightBytes = uint64_t{1} << 44;

Json jobStatus(zmq::context_t& context, const ClientOptions& options, const std::string& job, int64_t since) {
  protocol::ControlClient client(context, options.daemon, options.security);
  return client.request({{"type", protocol::kStatus}, {"job", job}, {"since", since}}, options.timeout)["job"];
}

// Reads one stage's weights file from its daemon into `path`, chunk by chunk.
uint64_t fetchStage(zmq::context_t& context, const ClientOptions& options, const std::string& job, int stage,
                    const Json& daemon, int64_t step, const std::string& path) {
  protocol::ClientSecurity security;
  if (options.security.curve()) {
    security.self = options.security.self;
    security.serverKey = daemon.value("key", std::string());
  }
  const std::string endpoint = daemon.value("endpoint", std::string());
  protocol::ControlClient client(context, endpoint, security);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("cannot write \"" + path + "\": " + std::strerror(errno));
  protocol::ExportRead request;
  request.job = job;
  request.stage = stage;
  request.step = step;
  // The copy whose files hold the weights (a healed job whose pipeline 0 left): bounded
  // like any copy's number; the daemon checks the rest.
  const Json replica = daemon.value("replica", Json(0));
  if (!replica.is_number_integer() || replica.get<int64_t>() < 0 || replica.get<int64_t>() > 255) {
    throw WireError("the job's status names stage " + std::to_string(stage) + "'s copy as " + replica.dump().substr(0, 40));
  }
  request.replica = static_cast<int>(replica.get<int64_t>());
  uint64_t size = 0;
  do {
    Json reply;
    try {
      reply = client.request(protocol::toJson(request), options.timeout);
    } catch (const std::exception& e) {
      throw Error("stage " + std::to_string(stage) + " (" + endpoint + "): " + e.what());
    }
    const uint64_t total = reply.value("size", uint64_t{0});
    const std::string chunk = protocol::base64Decode(reply.value("data", std::string()), protocol::kExportChunkBytes);
    if (total > kMaxStageWeightBytes || (request.offset > 0 && total != size) ||
        static_cast<uint64_t>(request.offset) + chunk.size() > total || (chunk.empty() && total > 0)) {
      throw WireError("stage " + std::to_string(stage) + " (" + endpoint + ") sent an inconsistent chunk");
    }
    size = total;
    out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    request.offset += static_cast<int64_t>(chunk.size());
  } while (static_cast<uint64_t>(request.offset) < size);
  out.flush();
  if (!out) throw Error("cannot write \"" + path + "\": " + std::strerror(errno));
  return size;
}

}  // namespace

void checkOutputPath(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::symlink_status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    throw Error("cannot write \"" + path + "\": " + ec.message());
  }
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    throw Error("\"" + path + "\" exists and is not a regular file: the output is written only as a new file or over a regular one");
  }
}

int exportWeights(const ClientOptions& options, const std::string& job, const std::string& out,
                  const ExportOptions& exportOptions) {
  const int64_t step = exportOptions.step;
  const bool hf = exportOptions.format == "hf";
  std::vector<std::string> parts;
  const std::string merged = hf ? out + ".merged.tmp" : out;
  const int code = guarded([&] {
    if (hf) {
      checkOutputPath(merged);
    } else {
      checkOutputPath(out);
    }
    zmq::context_t context;
    const Json status = jobStatus(context, options, job, kAfterEveryStep);
    protocol::ModelSpec model;
    std::vector<std::pair<std::string, std::string>> tied;  // written once (protocol::tiedCopies)
    try {
      const protocol::JobSpec spec = protocol::parseJobSpec(status.value("spec", std::string()));
      model = spec.model;
      tied = protocol::tiedCopies(model, spec.stages.size());
    } catch (const SpecError& e) {
      if (hf) throw;
      // The safetensors format needs nothing of the spec (a job of another version's?).
      std::cerr << "note: the job's spec does not parse here (" << e.what()
                << "); a tied matrix, if any, is written as both its copies\n";
    }
    if (hf) {
      if (model.subspace.enabled()) {
        throw Error("job " + job + " trains a subspace model (model.subspace), which has no Hugging Face layout: export it as safetensors");
      }
      if (!protocol::hasHfLayout(model)) {
        throw Error("job " + job + " trains model.kind \"" + model.kind +
                    "\", which has no Hugging Face layout (llama, gpt2 and the bert layout have): export it as safetensors");
      }
    }
    if (step >= 0) {
      const auto& kept = status["checkpoints"];
      if (std::find(kept.begin(), kept.end(), Json(step)) == kept.end()) {
        throw Error("job " + job + " has no complete checkpoint after step " + std::to_string(step) +
                    " (complete: " + kept.dump() + ")");
      }
    } else if (status["state"] != "succeeded") {
      throw Error("job " + job + " is " + status["state"].get<std::string>() +
                  ": final weights exist once it has succeeded; give --step with a checkpoint (" +
                  status["checkpoints"].dump() + ")");
    }
    const Json& daemons = status["stage_daemons"];
    uint64_t bytes = 0;
    for (size_t i = 0; i < daemons.size(); ++i) {
      parts.push_back(out + ".stage-" + std::to_string(i) + ".part");
      // The step's number is 1-based, as every interface shows it; the request carries its index.
      bytes += fetchStage(context, options, job, static_cast<int>(i), daemons[i], step < 0 ? -1 : step - 1, parts.back());
    }
    const MergedFile joined = mergeSafetensors(
        parts, merged,
        {{"format", "pt"}, {"skytrain_job", job}, {"skytrain_step", step < 0 ? "final" : std::to_string(step)}}, tied);
    for (const auto& copy : joined.keptApart) {
      const std::string why = "the tied copy \"" + copy + "\" differs from the matrix it copies (one copy frozen by "
                              "model.trainable while the other trains?)";
      if (hf) throw Error(why + ": Hugging Face's tied layout holds one matrix; export it as safetensors");
      std::cerr << "note: " << why << "; both are written\n";
    }
    const std::string what = step < 0 ? std::string("final weights") : "checkpoint after step " + std::to_string(step);
    if (!hf) {
      std::cout << "wrote " << out << ": " << joined.tensors << " tensors from " << daemons.size() << " stages ("
                << formatBytes(static_cast<double>(bytes)) << "), " << what << "\n";
      return 0;
    }
    const HfExport written = writeHfDirectory(model, merged, out, exportOptions.shardBytes);
    std::cout << "wrote " << out << "/: a Hugging Face " << model.kind << " model, " << written.tensors << " tensors in "
              << written.shards << (written.shards == 1 ? " file" : " shards") << " ("
              << formatBytes(static_cast<double>(written.bytes)) << ") and config.json, from " << daemons.size()
              << " stages, " << what << "\n";
    return 0;
  });
  for (const auto& part : parts) std::remove(part.c_str());
  if (hf) std::remove(merged.c_str());
  return code;
}

int plot(const ClientOptions& options, const std::vector<std::string>& jobs, const std::string& out,
         const PlotOptions& plotOptions) {
  return guarded([&] {
    checkOutputPath(out);
    zmq::context_t context;
    std::vector<Json> statuses;
    for (const auto& job : jobs) statuses.push_back(jobStatus(context, options, job, 0));
    const std::string svg = renderPlot(statuses, plotOptions);
    const std::string tmp = out + ".tmp";
    {
      std::ofstream file(tmp, std::ios::trunc);
      file << svg;
      if (!file.flush()) throw Error("cannot write \"" + tmp + "\": " + std::strerror(errno));
    }
    if (std::rename(tmp.c_str(), out.c_str()) != 0) throw Error("cannot write \"" + out + "\": " + std::strerror(errno));
    std::cout << "wrote " << out << " (" << jobs.size() << (jobs.size() == 1 ? " job" : " jobs") << ")\n";
    return 0;
  });
}

int probe(const ClientOptions& options, size_t bigBytes) {
  return guarded([&] {
    zmq::context_t context;
    protocol::ControlClient control(context, options.daemon, options.security);
    const Json ping = control.request({{"type", protocol::kPing}}, options.timeout);
    ProbeOptions probeOptions;
    probeOptions.bigBytes = bigBytes;
    Json result = probeDataEndpoint(context, ping.at("data").get<std::string>(), options.security, probeOptions);
    result["endpoint"] = options.daemon;
    if (options.json) {
      std::cout << result.dump(2) << "\n";
    } else {
      std::cout << formatProbe(result);
    }
    return 0;
  });
}

}  // namespace skytrain::client
