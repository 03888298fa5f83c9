#include "stages/models/torchscript/torchscript_stage.h"

#include <torch/script.h>

#include "scheduler/error.h"
#include "stages/module_stage.h"

namespace skytrain::stages {
namespace {

// What a stage passes on from what its method returned: a Tensor; from a tuple or list
// (nanoGPT's `(logits, loss)`) its first element; from a dict its "logits" entry (Hugging
// Face's outputs traced with return_dict). Anything else is refused naming what came back.
at::Tensor asTensor(const c10::IValue& value, const char* method) {
  if (value.isTensor()) return value.toTensor();
  if (value.isTuple() && !value.toTupleRef().elements().empty() && value.toTupleRef().elements()[0].isTensor()) {
    return value.toTupleRef().elements()[0].toTensor();
  }
  if (value.isList() && value.toListRef().size() > 0 && value.toListRef()[0].isTensor()) return value.toListRef()[0].toTensor();
  if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) {
      if (entry.key().isString() && entry.key().toStringRef() == "logits" && entry.value().isTensor()) {
        return entry.value().toTensor();
      }
    }
  }
  throw Error(std::string(method) + " returned " + value.tagKind() +
              ": a stage passes on a Tensor, the first element of a tuple or list, or a dict's \"logits\"");
}

}  // namespace

std::string firstLineOf(const std::exception& e) {
  std::string text = e.what();
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) text = c10->what_without_backtrace();
  // The TorchScript interpreter puts its own traceback first and the error ("RuntimeError:
  // mat1 and mat2 shapes cannot be multiplied ...") last: that line is the reason.
  std::string reason;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string line = text.substr(start, end - start);
    const size_t colon = line.find("Error: ");
    if (colon != std::string::npos && line.find(' ') > colon) reason = line;
    start = end + 1;
  }
  if (!reason.empty()) return reason;
  const auto end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

std::unique_ptr<Stage> loadTorchScriptStage(const std::string& file, bool moduleLoss) {
  torch::jit::Module module;
  try {
    module = torch::jit::load(file, c10::Device(c10::kCPU));
  } catch (const std::exception& e) {
    throw Error(file + ": not a loadable TorchScript module: " + firstLineOf(e));
  }
  if (!module.find_method("forward")) throw Error(file + ": the module has no forward method");
  if (moduleLoss && !module.find_method("loss")) {
    throw Error(file + ": the module has no loss(output, targets) method (model.loss is \"module\")");
  }
  ModuleHooks hooks;
  hooks.forward = [module](const at::Tensor& x) mutable { return asTensor(module.forward({x}), "forward"); };
  hooks.train = [module](bool on) mutable { module.train(on); };
  hooks.parameters = [module] {
    NamedTensors out;
    for (const auto& item : module.named_parameters(/*recurse=*/true)) out.emplace_back(item.name, item.value);
    return out;
  };
  hooks.buffers = [module] {
    NamedTensors out;
    for (const auto& item : module.named_buffers(/*recurse=*/true)) out.emplace_back(item.name, item.value);
    return out;
  };
  if (moduleLoss) {
    hooks.loss = [module](const at::Tensor& output, const at::Tensor& targets) mutable {
      return asTensor(module.get_method("loss")({output, targets}), "loss");
    };
  }
  return std::make_unique<ModuleStage>(std::move(hooks));
}

}  // namespace skytrain::stages
