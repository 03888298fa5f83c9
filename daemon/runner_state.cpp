// PipelineRunner's checkpoints (pipeline_runner.h): the snapshot of a stage at a step
// boundary and its restoration.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <map>
#include <set>

#include "compression/codec_registry.h"
#include "daemon/pipeline_runner.h"
#include "scheduler/error.h"

namespace skytrain::daemon {
namespace {

std::string stateKey(const at::Tensor& parameter) { return c10::guts::to_string(parameter.unsafeGetTensorImpl()); }

}  // namespace

StageSnapshot PipelineRunner::snapshot(const std::string& jobId, int64_t step) const {
  StageSnapshot s;
  auto& tensors = s.tensors.tensors;
  const auto& states = optimizer_->state();
  for (const auto& [name, tensor] : model_->stateDict()) {
    tensors.emplace_back("param/" + name, tensor.detach().to(at::kCPU, false, true));
    auto it = states.find(stateKey(tensor));
    if (it == states.end()) continue;  // no step taken yet
    const auto& adam = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    tensors.emplace_back("adamw/" + name + "/step", torch::tensor(adam.step(), torch::kLong));
    tensors.emplace_back("adamw/" + name + "/exp_avg", adam.exp_avg().to(at::kCPU, false, true));
    tensors.emplace_back("adamw/" + name + "/exp_avg_sq", adam.exp_avg_sq().to(at::kCPU, false, true));
  }
  const std::pair<const char*, const compression::Codec*> codecs[] = {
      {"steady.forward", steady_.forward.get()}, {"steady.backward", steady_.backward.get()},
      {"warmup.forward", warmup_.forward.get()}, {"warmup.backward", warmup_.backward.get()},
      {"eval", evalCodec_.get()}};
  for (const auto& [prefix, codec] : codecs) {
    for (const auto& [name, tensor] : codec->state()) tensors.emplace_back(std::string("codec/") + prefix + "/" + name, tensor.clone());
  }
  // Stateful decoders ("+pred"), under their stream: "decoder/<direction>/<spec>/<name>".
  for (const auto& [stream, codec] : streamDecoders_) {
    for (const auto& [name, tensor] : codec->state()) tensors.emplace_back("decoder/" + stream + "/" + name, tensor.clone());
  }
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    tensors.emplace_back("rng/cpu", generator.get_state());
  }
  // The delayed update's gradients not yet applied (drain() ran): they are the run's future too.
  SKYTRAIN_CHECK(!deferred_, "a snapshot of the delayed update needs drain() first");
  for (const auto& [name, tensor] : priorWeights_) tensors.emplace_back("previous/" + name, tensor.to(at::kCPU, false, true));
  for (size_t k = 0; k < pending_.size(); ++k) {
    const auto& p = pending_[k];
    const std::string head = "pending/" + std::to_string(k) + "/";
    tensors.emplace_back(head + "step", torch::tensor(static_cast<int64_t>(p.step), torch::kLong));
    if (p.needsTotal) tensors.emplace_back(head + "total", p.total.detach().to(at::kCPU, false, true).reshape({}));
    for (const auto& [name, grad] : gradients(*copies_[p.step % 2])) {
      tensors.emplace_back(head + "grad/" + name, grad.detach().to(at::kCPU, false, true));
    }
  }
  s.meta = {{"format", kCheckpointFormat},
            {"job", jobId},
            {"stage", stage_},
            {"step", step},
            {"seed", spec_.seed},
            {"layers", {spec_.stages[stage_].firstLayer, spec_.stages[stage_].lastLayer}},
            {"plan", {{"micro_batches", plan_.microBatches},
                      {"schedule", scheduler::toString(plan_.schedule)},
                      {"warmups", plan_.warmups},
                      {"forward_codec", steadyForward_},
                      {"backward_codec", steadyBackward_}}},
            {"codecs", {{"forward", spec_.compression.forward},
                        {"backward", spec_.compression.backward},
                        {"warmup", spec_.compression.warmup},
                        {"warmup_steps", spec_.compression.warmupSteps}}}};
  return s;
}

stages::SafeTensors PipelineRunner::weights() const {
  stages::SafeTensors out;
  for (const auto& [name, tensor] : model_->stateDict()) out.tensors.emplace_back(name, tensor.detach().to(at::kCPU).contiguous());
  out.metadata = {{"format", "pt"}, {"skytrain_stage", std::to_string(stage_)}};
  return out;
}

void PipelineRunner::restore(const StageSnapshot& snapshot) {
  const auto& meta = snapshot.meta;
  const std::string where = "checkpoint of step " + std::to_string(meta.value("step", int64_t{-1})) + " stage " +
                            std::to_string(stage_);
  const auto& layers = meta.value("layers", nlohmann::json::array());
  if (layers != nlohmann::json{spec_.stages[stage_].firstLayer, spec_.stages[stage_].lastLayer} ||
      meta.value("seed", uint64_t{0}) != spec_.seed || meta.value("codecs", nlohmann::json())["forward"] != spec_.compression.forward ||
      meta["codecs"]["backward"] != spec_.compression.backward) {
    throw WireError(where + " was made for other layers, seed or codecs than this job's");
  }
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, tensor] : snapshot.tensors.tensors) tensors[name] = tensor;
  std::set<std::string> used;
  auto take = [&](const std::string& name, const at::Tensor& like) -> std::optional<at::Tensor> {
    auto it = tensors.find(name);
    if (it == tensors.end()) return std::nullopt;
    if (like.defined() && (it->second.sizes() != like.sizes() || it->second.scalar_type() != like.scalar_type())) {
      throw WireError(where + ": tensor \"" + name + "\" has shape " + c10::str(it->second.sizes()) + " " +
                      c10::toString(it->second.scalar_type()) + ", this stage's is " + c10::str(like.sizes()) + " " +
                      c10::toString(like.scalar_type()));
    }
    used.insert(name);
    return it->second;
  };
  torch::NoGradGuard noGrad;
  auto& states = optimizer_->state();
  for (const auto& [name, tensor] : model_->stateDict()) {
    const auto value = take("param/" + name, tensor);
    if (!value) throw WireError(where + ": tensor \"param/" + name + "\" is missing");
    tensor.copy_(*value);
    const auto step = take("adamw/" + name + "/step", torch::tensor(int64_t{0}, torch::kLong));
    if (!step) {
      states.erase(stateKey(tensor));
      continue;
    }
    const auto expAvg = take("adamw/" + name + "/exp_avg", tensor);
    const auto expAvgSq = take("adamw/" + name + "/exp_avg_sq", tensor);
    if (!expAvg || !expAvgSq) throw WireError(where + ": AdamW state of \"" + name + "\" is incomplete");
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(step->item<int64_t>());
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
    setPlan(restored);
  } catch (const WireError&) {
    throw;
  } catch (const Error& e) {
    throw WireError(where + ": its plan: " + e.what());
  }
  const std::pair<const char*, compression::Codec*> codecs[] = {
      {"steady.forward", steady_.forward.get()}, {"steady.backward", steady_.backward.get()},
      {"warmup.forward", warmup_.forward.get()}, {"warmup.backward", warmup_.backward.get()},
      {"eval", evalCodec_.get()}};
  for (const auto& [prefix, codec] : codecs) {
    const std::string head = std::string("codec/") + prefix + "/";
    compression::CodecState state;
    for (const auto& [name, tensor] : tensors) {
      if (name.rfind(head, 0) == 0) state.emplace_back(name.substr(head.size()), tensor), used.insert(name);
    }
    codec->loadState(state);
  }
  restoreDecoders(tensors, used, where);
  if (const auto rng = take("rng/cpu", at::Tensor())) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    try {
      generator.set_state(*rng);
    } catch (const c10::Error& e) {
      throw WireError(where + ": bad RNG state: " + e.what_without_backtrace());
    }
  }
  pending_.clear();
  deferred_.reset();
  priorWeights_.clear();
  for (const auto& [name, tensor] : model_->stateDict()) {
    if (const auto value = delayed_ ? take("previous/" + name, tensor) : std::nullopt) priorWeights_[name] = value->to(device_).clone();
  }
  const int64_t step = meta.value("step", int64_t{-1});
  for (int k = 0; delayed_ && k < 2; ++k) {
    const std::string head = "pending/" + std::to_string(k) + "/";
    const auto pendingStep = take(head + "step", torch::tensor(int64_t{0}, torch::kLong));
    if (!pendingStep) break;
    PendingGradient p;
    const int64_t value = pendingStep->item<int64_t>();
    const bool inOrder = pending_.empty() || value > static_cast<int64_t>(pending_.back().step);
    if ((value != step - 1 && value != step) || !inOrder) {
      throw WireError(where + ": a pending gradient of step " + std::to_string(value));
    }
    p.step = static_cast<uint64_t>(value);
    const auto total = take(head + "total", torch::tensor(0.0f));
    p.needsTotal = total.has_value();
    if (total) p.total = total->clone();
    for (auto& [name, parameter] : copies_[p.step % 2]->stateDict()) {
      parameter.mutable_grad() = at::Tensor();
      if (const auto grad = take(head + "grad/" + name, parameter)) parameter.mutable_grad() = grad->to(device_).clone();
    }
    pending_.push_back(std::move(p));
  }
  for (const auto& [name, tensor] : tensors) {
    if (!used.count(name)) throw WireError(where + ": unexpected tensor \"" + name + "\"");
  }
}

void PipelineRunner::restoreDecoders(const std::map<std::string, at::Tensor>& tensors, std::set<std::string>& used,
                                     const std::string& where) {
  streamDecoders_.clear();
  std::map<std::string, compression::CodecState> states;  // by "<direction>/<spec>"
  const std::string head = "decoder/";
  for (const auto& [name, tensor] : tensors) {
    if (name.rfind(head, 0) != 0) continue;
    const size_t direction = name.find('/', head.size());
    const size_t spec = direction == std::string::npos ? direction : name.find('/', direction + 1);
    if (spec == std::string::npos || spec + 1 >= name.size()) throw WireError(where + ": bad decoder state name \"" + name + "\"");
    states[name.substr(head.size(), spec - head.size())].emplace_back(name.substr(spec + 1), tensor);
    used.insert(name);
  }
  if (states.size() > kMaxDecoderStreams) {
    throw WireError(where + ": more than " + std::to_string(kMaxDecoderStreams) + " decoder streams");
  }
  for (auto& [stream, state] : states) {
    std::unique_ptr<compression::Codec> codec;
    try {
      codec = compression::builtinCodecs().make(stream.substr(stream.find('/') + 1));
    } catch (const Error& e) {
      throw WireError(where + ": decoder stream \"" + stream + "\": " + e.what());
    }
    codec->loadState(state);
    streamDecoders_[stream] = std::move(codec);
  }
}

}  // namespace skytrain::daemon
