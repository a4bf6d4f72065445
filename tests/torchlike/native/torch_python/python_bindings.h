// The method tables of libtorch_python, reduced. CPython reaches torch's bindings (hidden,
// static functions) through PyMethodDef tables that the module init returns; the stand-in's
// Python package reaches them the same way: torchlike_methods() (the one export) returns every
// table entry's name, signature and function pointer, and the package calls the pointers
// through ctypes, which releases the GIL around each call, as the real bindings do.
#pragma once

#include <string>

#include "torchlike/aten.h"

namespace torch {

// One entry: the signature is the return type then the arguments, one letter each:
// v void, p pointer (a tensor, stream, event or graph handle), d double, l int64, s string.
struct MethodDef {
  const char* name;
  const char* signature;
  void* function;
};

// HANDLE_TH_ERRORS / END_HANDLE_TH_ERRORS: a C++ error becomes the thread's pending Python error.
void set_error(const std::string& message);

// A Python tensor holds one of these (THPVariable's cdata).
at::Tensor* wrap(at::Tensor tensor);
inline at::Tensor& unpack(void* handle) { return *static_cast<at::Tensor*>(handle); }

// Each binding file adds its table (terminated by an entry with a null name) when the library
// is loaded, as initModule adds every file's methods to torch._C:
//   const torch::RegisterMethods register_my_methods(my_methods);
struct RegisterMethods {
  explicit RegisterMethods(const MethodDef* table);
};

}  // namespace torch

#define HANDLE_TH_ERRORS try {
#define END_HANDLE_TH_ERRORS(failed) \
  }                                  \
  catch (const std::exception& e) {  \
    ::torch::set_error(e.what());    \
    return failed;                   \
  }
