#include "daemon/stage/state/stage_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <sstream>
#include <type_traits>
#include <utility>

#include "daemon/stage/runner/codec_set.h"
#include "daemon/stage/state/snapshot_reader.h"
#include "daemon/stage/runner/stage_context.h"
#include "daemon/stage/runner/stage_links.h"
#include "daemon/stage/update/update_policy.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

// The optimizer keeps a parameter's state under its TensorImpl: LibTorch 1.13 under the
// pointer as text (c10::guts::to_string's, i.e. operator<<'s), 2.x under the pointer itself.
using StateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

template <typename Key>
Key stateKeyAs(const at::Tensor& parameter) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << parameter.unsafeGetTensorImpl();
    return text.str();
  } else {
    return parameter.unsafeGetTensorImpl();
  }
}

StateKey stateKey(const at::Tensor& parameter) { return stateKeyAs<StateKey>(parameter); }

}  // namespace

StageState::StageState(const StageContext& context, stages::Stage& model, torch::optim::Optimizer& optimizer,
                       CodecSet& codecs, StageLinks& links, UpdatePolicy& update, std::string dataFingerprint)
    : context_(context), model_(model), optimizer_(optimizer), codecs_(codecs), links_(links), update_(update),
      dataFingerprint_(std::move(dataFingerprint)) {}

void StageState::addExtras(std::vector<std::pair<std::string, at::Tensor>>& tensors) const {
  codecs_.saveState(tensors);
  // Stateful decoders ("+pred"), under their stream: "decoder/<direction>/<spec>/<name>".
  links_.saveDecoders(tensors);
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    tensors.emplace_back("rng/cpu", generator.get_state());
  }
  // The delayed update's gradients not yet applied (drain() ran), the loss scale: the run's
  // future too.
  update_.saveState(tensors);
}

std::vector<std::pair<std::string, at::Tensor>> StageState::extras() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  addExtras(out);
  for (auto& entry : out) entry.second = entry.second.detach().to(at::kCPU, false, /*copy=*/true);
  return out;
}

StageSnapshot StageState::snapshot(const std::string& jobId, int64_t step, const RunPlan& plan, bool borrow,
                                   const std::vector<std::pair<std::string, at::Tensor>>* extras) const {
  StageSnapshot s;
  s.borrowed = borrow;
  auto& tensors = s.tensors.tensors;
  const auto& states = optimizer_.state();
  // A CPU tensor borrowed is itself; otherwise a copy (a GPU's tensors always are).
  auto held = [borrow](const at::Tensor& t) { return t.detach().to(at::kCPU, false, /*copy=*/!borrow); };
  for (const auto& [name, tensor] : model_.stateDict()) {
    tensors.emplace_back("param/" + name, held(tensor));
    auto it = states.find(stateKey(tensor));
    if (it == states.end()) continue;  // no step taken yet
    const auto& adam = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    tensors.emplace_back("adamw/" + name + "/step", torch::tensor(adam.step(), torch::kLong));
    tensors.emplace_back("adamw/" + name + "/exp_avg", held(adam.exp_avg()));
    tensors.emplace_back("adamw/" + name + "/exp_avg_sq", held(adam.exp_avg_sq()));
  }
  if (extras) {
    tensors.insert(tensors.end(), extras->begin(), extras->end());
  } else {
    addExtras(tensors);
  }
  const auto& spec = context_.spec;
  s.meta = {{"format", kCheckpointFormat},
            {"job", jobId},
            {"stage", context_.stage},
            {"step", step},             // the index (0-based), which sampling uses
            {"step_number", step + 1},  // as every interface shows it, and the directory's name
            {"seed", spec.seed},
            {"layers", {spec.stages[context_.stage].firstLayer, spec.stages[context_.stage].lastLayer}},
            {"plan", {{"micro_batches", plan.microBatches},
                      {"schedule", scheduler::toString(plan.schedule)},
                      {"warmups", plan.warmups},
                      {"forward_codec", codecs_.forwardSpec()},
                      {"backward_codec", codecs_.backwardSpec()}}},
            {"codecs", {{"forward", spec.compression.forward},
                        {"backward", spec.compression.backward},
                        {"warmup", spec.compression.warmup},
                        {"warmup_steps", spec.compression.warmupSteps}}}};
  if (!dataFingerprint_.empty()) s.meta["data"] = dataFingerprint_;
  return s;
}

void StageState::restore(const StageSnapshot& snapshot, const std::function<void(const RunPlan&)>& applyPlan) {
  const auto& meta = snapshot.meta;
  const auto& spec = context_.spec;
  const int64_t step = meta.value("step", int64_t{-1});
  SnapshotReader reader(snapshot.tensors.tensors,
                        "checkpoint of step " + std::to_string(step + 1) + " stage " + std::to_string(context_.stage));
  const std::string& where = reader.where();
  const auto& layers = meta.value("layers", nlohmann::json::array());
  if (layers != nlohmann::json{spec.stages[context_.stage].firstLayer, spec.stages[context_.stage].lastLayer} ||
      meta.value("seed", uint64_t{0}) != spec.seed || meta.value("codecs", nlohmann::json())["forward"] != spec.compression.forward ||
      meta["codecs"]["backward"] != spec.compression.backward) {
    throw WireError(where + " was made for other layers, seed or codecs than this job's");
  }
  if (const auto data = meta.value("data", std::string()); !data.empty() && data != dataFingerprint_) {
    throw WireError(where + " was made reading another corpus (fingerprint " + data + ", this stage reads " +
                    (dataFingerprint_.empty() ? std::string("none") : dataFingerprint_) +
                    "): resuming would continue on different data");
  }
  torch::NoGradGuard noGrad;
  auto& states = optimizer_.state();
  for (const auto& [name, tensor] : model_.stateDict()) {
    const auto value = reader.take("param/" + name, tensor);
    if (!value) throw WireError(where + ": tensor \"param/" + name + "\" is missing");
    tensor.copy_(*value);
    const auto adamStep = reader.take("adamw/" + name + "/step", torch::tensor(int64_t{0}, torch::kLong));
    if (!adamStep) {
      states.erase(stateKey(tensor));
      continue;
    }
    const auto expAvg = reader.take("adamw/" + name + "/exp_avg", tensor);
    const auto expAvgSq = reader.take("adamw/" + name + "/exp_avg_sq", tensor);
    if (!expAvg || !expAvgSq) throw WireError(where + ": AdamW state of \"" + name + "\" is incomplete");
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(adamStep->item<int64_t>());
    state->exp_avg(expAvg->to(tensor.device(), false, true));
    state->exp_avg_sq(expAvgSq->to(tensor.device(), false, true));
    states[stateKey(tensor)] = std::move(state);
  }
  // The plan first: it makes the codecs (those "auto" chose) whose state follows.
  const auto& plan = meta["plan"];
  RunPlan restored;
  restored.microBatches = plan.value("micro_batches", 1);
  const auto kind = scheduler::parseScheduleKind(plan.value("schedule", std::string("?")));
  if (!kind) throw WireError(where + ": unknown schedule in its plan");
  restored.schedule = *kind;
  restored.warmups = plan.value("warmups", std::vector<int>{});
  restored.forwardCodec = plan.value("forward_codec", std::string());
  restored.backwardCodec = plan.value("backward_codec", std::string());
  try {
    applyPlan(restored);
  } catch (const WireError&) {
    throw;
  } catch (const Error& e) {
    throw WireError(where + ": its plan: " + e.what());
  }
  codecs_.loadState(reader);
  links_.restoreDecoders(reader);
  if (const auto rng = reader.take("rng/cpu", at::Tensor())) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    try {
      generator.set_state(*rng);
    } catch (const c10::Error& e) {
      throw WireError(where + ": bad RNG state: " + e.what_without_backtrace());
    }
  }
  update_.restoreState(reader, step);
  reader.checkAllTaken();
}

}  // namespace skytrain::daemon
