// Mirrors torch/csrc/Module.cpp (initModule gathers the method tables of every binding file) and
// torch/csrc/Exceptions.h (a C++ error is turned into a Python exception).
#include <vector>

#include "python_bindings.h"

namespace torch {
namespace {
thread_local std::string pending_error;
thread_local bool has_error = false;
}  // namespace

void set_error(const std::string& message) {
  pending_error = message;
  has_error = true;
}

at::Tensor* wrap(at::Tensor tensor) { return new at::Tensor(std::move(tensor)); }

namespace {
std::vector<MethodDef>& all_methods() {
  static std::vector<MethodDef> methods;
  return methods;
}
}  // namespace

RegisterMethods::RegisterMethods(const MethodDef* table) {
  for (const MethodDef* m = table; m->name; ++m) all_methods().push_back(*m);
}

}  // namespace torch

extern "C" {

// The module init: every binding file's table, in one.
TORCH_PYTHON_API const torch::MethodDef* torchlike_methods() {
  static const std::vector<torch::MethodDef> table = [] {
    std::vector<torch::MethodDef> all = torch::all_methods();
    all.push_back({nullptr, nullptr, nullptr});
    return all;
  }();
  return table.data();
}

// PyErr_Occurred + the message of the pending error, cleared when read.
TORCH_PYTHON_API const char* torchlike_take_error() {
  if (!torch::has_error) return nullptr;
  torch::has_error = false;
  return torch::pending_error.c_str();
}

}  // extern "C"
