// Mirrors torch/csrc/autograd/python_engine.cpp: THPEngine_run_backward releases the GIL and
// runs the engine; PythonEngine::thread_init gives each device thread a PyThreadState and
// releases the GIL at once (gil_scoped_acquire, then gil_scoped_release), so the thread has a
// thread state but no Python frames while it runs backward ops. The CPython API is looked up
// in the process (the interpreter exports it), as an extension module links it.
#include <dlfcn.h>

#include "python_bindings.h"

namespace torch::autograd::python {

class PythonEngine : public Engine {
 public:
  static Engine& get_python_engine() {
    static PythonEngine* engine = new PythonEngine;
    return *engine;
  }

  TORCHLIKE_FRAME void thread_init(int device) override {
    using Ensure = int (*)();
    using SaveThread = void* (*)();
    auto ensure = reinterpret_cast<Ensure>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
    auto save_thread = reinterpret_cast<SaveThread>(dlsym(RTLD_DEFAULT, "PyEval_SaveThread"));
    if (ensure && save_thread) {
      ensure();       // pybind11::gil_scoped_acquire gil;
      save_thread();  // pybind11::gil_scoped_release no_gil;
    }
    Engine::thread_init(device);
  }

  TORCHLIKE_FRAME void execute(const at::Tensor& root, const at::Tensor& grad) { Engine::execute(root, grad); }
};

namespace {
Engine* python_engine_stub() { return &PythonEngine::get_python_engine(); }

// Mirrors the registration in THPEngine_initModule (set_default_engine_stub).
struct RegisterPythonEngine {
  RegisterPythonEngine() { set_default_engine_stub(python_engine_stub); }
};
const RegisterPythonEngine register_python_engine;
}  // namespace

}  // namespace torch::autograd::python

// Mirrors THPEngine_run_backward: the root's gradient defaults to ones (Python builds it).
TORCHLIKE_FRAME int64_t THPEngine_run_backward(void* root, void* grad) {
  HANDLE_TH_ERRORS
  auto& engine =
      static_cast<torch::autograd::python::PythonEngine&>(torch::autograd::python::PythonEngine::get_python_engine());
  engine.execute(torch::unpack(root), torch::unpack(grad));
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}

namespace torch {

namespace {
const MethodDef engine_methods[] = {
    {"run_backward", "l:pp", reinterpret_cast<void*>(THPEngine_run_backward)},
    {nullptr, nullptr, nullptr},
};
const RegisterMethods register_engine_methods(engine_methods);
}  // namespace

}  // namespace torch
