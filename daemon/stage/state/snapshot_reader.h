// SnapshotReader: a checkpoint's tensors as a stage's parts restore them — each by name,
// checked against the shape and dtype of what it replaces, and none left over at the end
// (a tensor nobody took is a checkpoint made for another job). Errors are WireErrors that
// name the checkpoint.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace skytrain::daemon {

class SnapshotReader {
 public:
  SnapshotReader(const std::vector<std::pair<std::string, at::Tensor>>& tensors, std::string where);

  // "checkpoint of step S stage K": what errors name.
  const std::string& where() const { return where_; }
  // The tensor `name`, checked to match `like`'s shape and dtype where `like` is defined;
  // nullopt when absent.
  std::optional<at::Tensor> take(const std::string& name, const at::Tensor& like);
  // Every tensor whose name starts with `prefix`, by name without it, in name order.
  std::vector<std::pair<std::string, at::Tensor>> takeUnder(const std::string& prefix);
  // Throws when a tensor was left untaken.
  void checkAllTaken() const;

 private:
  std::map<std::string, at::Tensor> tensors_;
  std::set<std::string> taken_;
  std::string where_;
};

}  // namespace skytrain::daemon
