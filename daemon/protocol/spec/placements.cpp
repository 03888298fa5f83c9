// Stage placements: the devices and data-parallel copies (replicas) of a job's stages,
// parsed and checked, and the slot -> placement mapping of job_spec.h.
#include "daemon/protocol/spec/placements.h"

#include "daemon/protocol/keys.h"
#include "scheduler/error.h"

namespace skytrain::protocol {

using nlohmann::json;

void checkEndpoint(const std::string& daemon, const std::string& key, const std::string& path) {
  if (daemon.rfind("tcp://", 0) != 0 && daemon.rfind("ipc://", 0) != 0) {
    throw SpecError(path + ".daemon", "\"" + daemon + "\" is not a tcp:// or ipc:// endpoint");
  }
  if (!key.empty() && !isZ85Key(key)) {
    throw SpecError(path + ".key", describe(json(key)) + " is not a 40-character Z85 public key");
  }
}

std::string parseDevice(ObjectReader& r) {
  const std::string device = r.string("device", "cpu");
  if (device == "cpu" || device == "cuda") return device;
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() <= 7 &&
      device.find_first_not_of("0123456789", 5) == std::string::npos && std::stoi(device.substr(5)) < 64) {
    return device;
  }
  throw SpecError(r.pathOf("device"), describe(json(device)) + " is not a device (cpu, cuda or cuda:N)");
}

std::vector<Placement> parseReplicas(ObjectReader& r) {
  const json* list = r.child("replicas", false);
  if (!list) return {};
  const std::string path = r.pathOf("replicas");
  if (!list->is_array() || list->size() > 255) {
    throw SpecError(path, "expected an array of at most 255 copies ({daemon, key, device}), got " + describe(*list));
  }
  std::vector<Placement> out;
  for (size_t i = 0; i < list->size(); ++i) {
    ObjectReader copy((*list)[i], path + "[" + std::to_string(i) + "]");
    Placement p;
    p.daemon = copy.string("daemon", std::nullopt);
    p.key = copy.string("key", "");
    p.device = parseDevice(copy);
    copy.finish();
    checkEndpoint(p.daemon, p.key, copy.path());
    out.push_back(std::move(p));
  }
  return out;
}

void checkReplicas(const JobSpec& spec) {
  const size_t copies = spec.stages[0].replicas.size();
  for (size_t i = 1; i < spec.stages.size(); ++i) {
    if (spec.stages[i].replicas.size() != copies) {
      throw SpecError("$.stages[" + std::to_string(i) + "].replicas",
                      std::to_string(spec.stages[i].replicas.size() + 1) + " copies, but stage 0 has " +
                          std::to_string(copies + 1) +
                          ": replica r of a stage feeds replica r of the next, so every stage needs as many");
    }
  }
  const int replicas = replicaCount(spec);
  if (replicas == 1) return;
  if (isFanIn(spec)) throw SpecError("$.stages[0].replicas", "ELECTRA fan-in jobs do not take replicas");
  if (spec.batchSize % replicas != 0) {
    throw SpecError("$.batch_size", std::to_string(spec.batchSize) + " is not divisible by the " +
                                        std::to_string(replicas) + " replicas of each stage");
  }
  if (spec.microBatches > 0 && (spec.batchSize / replicas) % spec.microBatches != 0) {
    throw SpecError("$.micro_batches", std::to_string(spec.microBatches) + " does not divide a replica's share (" +
                                           std::to_string(spec.batchSize / replicas) + " samples) of batch_size");
  }
}

void checkTiling(const std::vector<StageSpec>& stages, int modelLayers) {
  int expected = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    const auto& s = stages[i];
    const std::string path = "$.stages[" + std::to_string(i) + "].layers";
    const std::string range = "[" + std::to_string(s.firstLayer) + ", " + std::to_string(s.lastLayer) + "]";
    if (s.firstLayer < expected) {
      throw SpecError(path, "range " + range + " overlaps the previous stage, which ends at layer " +
                                std::to_string(expected));
    }
    if (s.firstLayer > expected) {
      throw SpecError(path, "range " + range + " leaves a gap: layers " + std::to_string(expected) + ".." +
                                std::to_string(s.firstLayer - 1) + " belong to no stage");
    }
    expected = s.lastLayer;
  }
  if (expected != modelLayers) {
    throw SpecError("$.stages", "the stages cover layers [0, " + std::to_string(expected) + ") but the model has " +
                                    std::to_string(modelLayers) + " layers");
  }
}

Placement placementOf(const JobSpec& spec, int slot) {
  const StageSpec& s = spec.stages.at(static_cast<size_t>(stageOfSlot(spec, slot)));
  const int replica = replicaOfSlot(spec, slot);
  if (replica == 0) return {s.daemon, s.key, s.device};
  return s.replicas.at(static_cast<size_t>(replica - 1));
}

std::string describeSlot(const JobSpec& spec, int slot) {
  const int replica = replicaOfSlot(spec, slot);
  return "stage " + std::to_string(stageOfSlot(spec, slot)) + (replica > 0 ? " replica " + std::to_string(replica) : "");
}

}  // namespace skytrain::protocol
