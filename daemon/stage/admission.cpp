#include "daemon/stage/admission.h"

#include <algorithm>
#include <filesystem>

#include "compression/wire/safetensors_header.h"
#include "daemon/ops/memory_limit.h"
#include "daemon/protocol/failures.h"
#include "daemon/stage/state/model_setup.h"
#include "daemon/stage/runner/pipeline_runner.h"
#include "scheduler/error.h"
#include "stages/weights/hf_checkpoint.h"
#include "stages/tokens/token_files.h"
#include "stages/tokens/token_manifest.h"
#include "stages/models/model_source.h"

namespace skytrain::daemon {
namespace {

namespace fs = std::filesystem;

bool under(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

// `modelDirectory`: a Hugging Face model directory is accepted too (its files are checked
// to stay inside it when read: stages/weights/hf_checkpoint.h).
std::string resolve(const std::string& file, const std::string& field, const std::vector<std::string>& roots,
                    bool modelDirectory = false) {
  std::error_code ec;
  const fs::path real = fs::canonical(file, ec);
  if (ec) throw SpecError(field, "\"" + file + "\" cannot be resolved: " + ec.message());
  bool allowed = false;
  std::string listed;
  for (const auto& root : roots) {
    const fs::path canonicalRoot = fs::weakly_canonical(root, ec);
    allowed = allowed || (!ec && under(real, canonicalRoot));
    listed += (listed.empty() ? "" : ", ") + root;
  }
  if (!allowed) {
    throw SpecError(field, "\"" + file + "\" (resolved: \"" + real.string() + "\") is not under this daemon's data_roots (" +
                               listed + ")");
  }
  if (modelDirectory && stages::HfCheckpoint::isModelDirectory(real.string())) return real.string();
  if (!fs::is_regular_file(real, ec)) {
    throw SpecError(field, "\"" + file + "\" is not a regular file" +
                               (modelDirectory ? " nor a Hugging Face model directory (with a config.json)" : ""));
  }
  return real.string();
}

// A pre-tokenised source's files, resolved: a directory `skytrain data prepare` wrote becomes
// its train shards (its validation shards join eval_files when the spec names none), and an
// indexed shard's .idx is held to the same roots as its .bin.
void resolveTokenFiles(std::vector<std::string>& files, protocol::DataSpec& data, bool ownEval,
                       const std::string& field, const std::vector<std::string>& roots) {
  std::vector<std::string> out;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string at = field + "[" + std::to_string(i) + "]";
    std::error_code ec;
    const fs::path real = fs::canonical(files[i], ec);
    if (!ec && stages::isTokenDirectory(real.string())) {
      resolve((real / stages::kTokenManifestName).string(), at, roots);
      stages::TokenManifest manifest;
      try {
        manifest = stages::readTokenManifest(real.string());
      } catch (const Error& e) {
        throw SpecError(at, e.what());
      }
      if (manifest.layout == "flat" && manifest.dtype != data.dtype) {
        throw SpecError(at, "\"" + files[i] + "\" holds flat " + manifest.dtype + " tokens: set data.dtype to \"" +
                                manifest.dtype + "\"");
      }
      for (const auto& name : manifest.train) out.push_back(resolve((real / name).string(), at, roots));
      if (ownEval) {
        for (const auto& name : manifest.validation) data.evalFiles.push_back(resolve((real / name).string(), at, roots));
      }
      continue;
    }
    out.push_back(resolve(files[i], at, roots));
  }
  for (const auto& bin : out) {
    const fs::path index = fs::path(bin).replace_extension(".idx");
    std::error_code ec;
    if (fs::path(bin).extension() == ".bin" && fs::exists(index, ec)) resolve(index.string(), field, roots);
  }
  files = std::move(out);
}

// The text a stage reads: its own files (a fan-in's producers), else data.files.
const std::vector<std::string>& filesOf(const protocol::JobSpec& spec, int stage) {
  const auto& own = spec.stages[stage].dataFiles;
  return own.empty() ? spec.data.files : own;
}

}  // namespace

std::string MemoryEstimate::describe() const {
  return megabytes(totalBytes()) + " (runtime " + megabytes(runtimeBytes) + ", weights " + megabytes(weightBytes) +
         ", gradients and AdamW state " + megabytes(optimizerBytes) + ", activation stash " + megabytes(stashBytes) +
         " for " + std::to_string(stashSamples) + " samples, step transients " + megabytes(transientBytes) +
         (copiesBytes > 0 ? ", delayed-update copies " + megabytes(copiesBytes) : "") + ", data " + megabytes(dataBytes) +
         ")";
}

void resolveDataFiles(protocol::JobSpec& spec, int stage, const std::vector<std::string>& roots) {
  if (auto& module = spec.stages.at(stage).module; !module.empty()) {
    module = resolve(module, "$.stages[" + std::to_string(stage) + "].module", roots);
  }
  for (size_t i = 0; i < spec.model.initFrom.size(); ++i) {
    spec.model.initFrom[i] = resolve(spec.model.initFrom[i], "$.model.init_from[" + std::to_string(i) + "]", roots, true);
  }
  // The stage's own init_from files: held to the same roots (a checkpoint of another job in
  // the state dir, or any file on the host, is not this job's to read).
  auto& ownInit = spec.stages.at(stage).initFrom;
  for (size_t i = 0; i < ownInit.size(); ++i) {
    ownInit[i] = resolve(ownInit[i], "$.stages[" + std::to_string(stage) + "].init_from[" + std::to_string(i) + "]", roots, true);
  }
  if (!protocol::readsData(spec, stage)) return;
  if (spec.data.format == "tokens") {
    for (size_t i = 0; i < spec.data.evalFiles.size(); ++i) {
      spec.data.evalFiles[i] = resolve(spec.data.evalFiles[i], "$.data.eval_files[" + std::to_string(i) + "]", roots);
    }
    const bool ownEval = spec.data.evalFiles.empty();
    if (spec.data.blend.empty()) resolveTokenFiles(spec.data.files, spec.data, ownEval, "$.data.files", roots);
    for (size_t s = 0; s < spec.data.blend.size(); ++s) {
      resolveTokenFiles(spec.data.blend[s].files, spec.data, ownEval, "$.data.blend[" + std::to_string(s) + "].files", roots);
    }
    if (!spec.data.sentencepieceModel.empty()) {
      spec.data.sentencepieceModel = resolve(spec.data.sentencepieceModel, "$.data.sentencepiece_model", roots);
    }
    return;
  }
  auto& own = spec.stages[stage].dataFiles;
  auto& files = own.empty() ? spec.data.files : own;
  const std::string field = spec.stages[stage].dataFiles.empty() ? "$.data.files" : "$.stages[" + std::to_string(stage) + "].data_files";
  for (size_t i = 0; i < files.size(); ++i) files[i] = resolve(files[i], field + "[" + std::to_string(i) + "]", roots);
  for (size_t i = 0; i < spec.data.evalFiles.size(); ++i) {
    spec.data.evalFiles[i] = resolve(spec.data.evalFiles[i], "$.data.eval_files[" + std::to_string(i) + "]", roots);
  }
  if (!spec.data.sentencepieceModel.empty()) {
    spec.data.sentencepieceModel = resolve(spec.data.sentencepieceModel, "$.data.sentencepiece_model", roots);
  }
}

MemoryEstimate estimateStageMemory(const protocol::JobSpec& spec, int stage, double budgetBytes,
                                   const stages::ModelSource* given) {
  std::unique_ptr<stages::ModelSource> made;
  if (!given) made = stages::makeModelSource(modelConfig(spec));
  const stages::ModelSource* source = given ? given : made.get();
  MemoryEstimate m;
  m.runtimeBytes = kRuntimeBytes;
  try {
    m.weightBytes = source->weightBytes(stage);
  } catch (const Error& e) {  // a module that is not what it claims: it would fail again
    throw Error(std::string(protocol::kBadModel) + e.what());
  }
  // The gradient, and AdamW's exp_avg and exp_avg_sq: under ZeRO-1 of a 1/R shard only; none
  // for a frozen frame.
  const double trained = m.weightBytes - source->frozenBytes(stage);
  const int copies = protocol::replicaCount(spec);
  m.optimizerBytes = trained + 2 * trained / (spec.optimizer.zero > 0 ? copies : 1);
  // What a step allocates and frees again, at its peak: AdamW's two temporaries of the
  // largest parameter; a tied matrix's gradient frames (sent, received, decoded); under
  // bf16 or fp16 each in-flight micro-batch's casts of the weights (half their bytes), kept for its
  // backward — one block's only under recompute. The largest parameter is the vocabulary
  // table on an end stage, else a block's widest matrix; never more than the weights.
  const auto& model = spec.model;
  const int stages = static_cast<int>(spec.stages.size());
  const bool end = stage == 0 || stage + 1 == stages;
  const double d = model.dModel;
  const double largest = std::min(m.weightBytes, 4.0 * std::max({end ? double(model.vocabSize) * d : 0.0, d * model.dFf, 3 * d * d}));
  m.transientBytes = 2 * largest;
  for (const auto& pair : source->tied()) {
    if (pair.firstStage == stage || pair.secondStage == stage) m.transientBytes += 3 * largest;
  }
  if (spec.precision != "fp32") {
    const int inFlight = model.recompute == "block" ? 1 : std::max(1, stages - stage);
    m.transientBytes += 0.5 * trained * inFlight;
  }
  // The delayed update keeps two more copies of the stage, and copies its snapshots.
  if (spec.update == "delayed") m.copiesBytes = (2 + 3) * m.weightBytes;
  std::error_code ec;
  for (const auto* files : {&spec.model.initFrom, &spec.stages.at(stage).initFrom}) {
    for (const auto& file : *files) {
      if (stages::HfCheckpoint::isModelDirectory(file)) {
        m.dataBytes += m.weightBytes;  // the stage's own tensors, held until copied in
        continue;
      }
      // Read whole, once, after its header is checked here: what the header says is read.
      m.dataBytes += static_cast<double>(compression::readSafetensorsHeader(file).fileBytes);
    }
  }
  if (protocol::readsData(spec, stage) && spec.data.format == "tokens") {
    // Mapped, not read: the windows a step touches are page cache, and an index is checked
    // in one pass that drops its pages behind it (stages/tokens/token_files.h).
    m.dataBytes += 32.0 * 1024 * 1024;
  } else if (protocol::readsData(spec, stage)) {
    for (const auto& file : filesOf(spec, stage)) {
      const auto size = std::filesystem::file_size(file, ec);
      // The text, its tokens (int32) and their train/validation copies.
      if (!ec) m.dataBytes += 9.0 * static_cast<double>(size);
    }
  }
  // The whole batch (a copy's share): the profile's first pass runs it at once, and GPipe
  // keeps every micro-batch in flight. Last, and only within the budget: a TorchScript
  // stage's stash is measured by running its module.
  m.stashSamples = spec.batchSize / copies;
  if (m.fixedBytes() <= budgetBytes) m.stashBytes = source->stashBytesPerSample(stage) * m.stashSamples;
  return m;
}

std::string describeBudget(double budgetBytes, const std::string& budgetSource) {
  return megabytes(budgetBytes) + " (" + budgetSource + ")";
}

void checkMemory(const MemoryEstimate& estimate, int stage, double budgetBytes, const std::string& budgetSource) {
  if (estimate.totalBytes() <= budgetBytes) return;
  throw Error("stage " + std::to_string(stage) + " needs an estimated " + estimate.describe() +
              ", over this daemon's memory budget of " + describeBudget(budgetBytes, budgetSource));
}

}  // namespace skytrain::daemon
