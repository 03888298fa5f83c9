#include "stages/weights/weights.h"

#include <fnmatch.h>
#include <torch/torch.h>

#include <map>
#include <set>

#include "scheduler/error.h"

namespace skytrain::stages {
namespace {

constexpr size_t kMaxListed = 20;  // mismatches named in one message; the rest are counted

bool matchesAny(const std::string& name, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) {
    if (fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
  }
  return false;
}

std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < kMaxListed; ++i) out += (i ? "; " : "") + items[i];
  if (items.size() > kMaxListed) out += "; and " + std::to_string(items.size() - kMaxListed) + " more";
  return out;
}

}  // namespace

ParameterCounts countParameters(const Stage& stage) {
  ParameterCounts counts;
  for (const auto& [name, p] : stage.namedParameters()) (p.requires_grad() ? counts.trainable : counts.frozen) += p.numel();
  return counts;
}

ParameterCounts applyTrainable(Stage& stage, const std::vector<std::string>& patterns) {
  if (!patterns.empty()) {
    for (auto& [name, p] : stage.namedParameters()) p.requires_grad_(matchesAny(name, patterns));
  }
  return countParameters(stage);
}

DecayGroups splitByDecay(const Stage& stage, const std::optional<std::vector<std::string>>& noDecay,
                         const std::map<std::string, std::string>& aliases) {
  DecayGroups groups;
  for (const auto& [name, p] : stage.namedParameters()) {
    if (!p.requires_grad()) continue;
    const auto alias = aliases.find(name);
    const std::string& judged = alias == aliases.end() ? name : alias->second;
    const bool skip = noDecay ? matchesAny(judged, *noDecay) : p.dim() < 2 || matchesAny(judged, kDefaultNoDecay);
    (skip ? groups.noDecay : groups.decay).push_back(p);
    if (skip) groups.noDecayNames.push_back(name);
  }
  return groups;
}

InitResult initialiseFrom(Stage& stage, const SafeTensors& file, const std::string& source, const std::string& prefix) {
  std::map<std::string, const at::Tensor*> byName;
  bool checkpoint = false;
  for (const auto& [name, tensor] : file.tensors) checkpoint = checkpoint || name.rfind("param/", 0) == 0;
  for (const auto& [name, tensor] : file.tensors) {
    if (!checkpoint) byName[name] = &tensor;
    else if (name.rfind("param/", 0) == 0) byName[name.substr(6)] = &tensor;
  }
  // A parameter's tensor: under its own name, or under its name without the stage's prefix.
  return initialiseFrom(
      stage,
      [&](const std::string& name) {
        auto it = byName.find(name);
        if (it == byName.end() && !prefix.empty() && name.rfind(prefix, 0) == 0) it = byName.find(name.substr(prefix.size()));
        return it == byName.end() ? at::Tensor() : *it->second;
      },
      source);
}

InitResult initialiseFrom(Stage& stage, const TensorLookup& find, const std::string& source) {
  InitResult result;
  std::vector<std::string> problems;
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  std::set<std::string> adopted;
  try {
    for (auto& name : stage.adopt(find)) adopted.insert(std::move(name));
  } catch (const Error& e) {
    problems.push_back(e.what());
  }
  auto consider = [&](const std::string& name, const at::Tensor& target, bool parameter) {
    if (adopted.count(name)) return;
    const at::Tensor value = find(name);
    if (!value.defined()) {
      if (!parameter) return;  // buffers keep their initial values
      if (target.requires_grad()) result.fromSeed.push_back(name);
      else problems.push_back(name + ": frozen but not in the file");
      return;
    }
    if (!value.sizes().equals(target.sizes())) {
      problems.push_back(name + ": the file's is " + c10::str(value.sizes()) + ", the stage's " + c10::str(target.sizes()));
    } else if (target.is_floating_point() != value.is_floating_point()) {
      problems.push_back(name + ": the file's is " + std::string(c10::toString(value.scalar_type())) + ", the stage's " +
                         c10::toString(target.scalar_type()));
    } else {
      copies.emplace_back(target, value);
    }
  };
  for (const auto& [name, p] : stage.namedParameters()) consider(name, p, true);
  const NamedTensors all = stage.stateDict();
  const size_t parameters = stage.namedParameters().size();
  for (size_t i = parameters; i < all.size(); ++i) consider(all[i].first, all[i].second, false);
  if (!problems.empty()) {
    throw Error("init_from " + source + ": " + std::to_string(problems.size()) + " mismatch" +
                (problems.size() > 1 ? "es" : "") + ": " + listed(problems));
  }
  torch::NoGradGuard noGrad;
  for (auto& [target, value] : copies) target.copy_(value.to(target.scalar_type()));
  result.loaded = static_cast<int>(copies.size() + adopted.size());
  return result;
}

}  // namespace skytrain::stages
