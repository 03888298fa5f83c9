#include "daemon/stage/state/snapshot_reader.h"

#include <torch/torch.h>

#include "scheduler/error.h"

namespace skytrain::daemon {

SnapshotReader::SnapshotReader(const std::vector<std::pair<std::string, at::Tensor>>& tensors, std::string where)
    : where_(std::move(where)) {
  for (const auto& [name, tensor] : tensors) tensors_[name] = tensor;
}

std::optional<at::Tensor> SnapshotReader::take(const std::string& name, const at::Tensor& like) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return std::nullopt;
  if (like.defined() && (it->second.sizes() != like.sizes() || it->second.scalar_type() != like.scalar_type())) {
    throw WireError(where_ + ": tensor \"" + name + "\" has shape " + c10::str(it->second.sizes()) + " " +
                    c10::toString(it->second.scalar_type()) + ", this stage's is " + c10::str(like.sizes()) + " " +
                    c10::toString(like.scalar_type()));
  }
  taken_.insert(name);
  return it->second;
}

std::vector<std::pair<std::string, at::Tensor>> SnapshotReader::takeUnder(const std::string& prefix) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto it = tensors_.lower_bound(prefix); it != tensors_.end() && it->first.rfind(prefix, 0) == 0; ++it) {
    out.emplace_back(it->first.substr(prefix.size()), it->second);
    taken_.insert(it->first);
  }
  return out;
}

void SnapshotReader::checkAllTaken() const {
  for (const auto& [name, tensor] : tensors_) {
    if (!taken_.count(name)) throw WireError(where_ + ": unexpected tensor \"" + name + "\"");
  }
}

}  // namespace skytrain::daemon
