// A stand-in for the autograd engine's device thread, as Python and trainshim see it.
// PythonEngine::thread_init (torch/csrc/autograd/python_engine.cpp) gives the thread a Python
// thread state through pybind11::gil_scoped_acquire, releases the GIL again with
// gil_scoped_release, and only then serves its ready queue (Engine::thread_main): the thread has
// a thread state and never a Python frame. THPEngine_run_backward releases the GIL around
// engine.execute, so the thread that called backward waits there, GIL released, until the device
// threads finished its graph. Python reaches this library through ctypes, as torch._C; libpython's
// API is looked up in the process, so one build serves every interpreter.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace {
cudaStream_t g_stream = nullptr;
void* g_count = nullptr;
}  // namespace

namespace at::native {
// The op the backward runs: nonzero_cuda (aten/src/ATen/native/cuda/Nonzero.cu) reads its result's
// size back before it can allocate the result, with memcpy_and_sync.
__attribute__((noinline)) long nonzero_cuda() {
  int count = 0;
  cudaMemcpyAsync(&count, g_count, sizeof count, cudaMemcpyDeviceToHost, g_stream);
  cudaStreamSynchronize(g_stream);
  return count;
}
}  // namespace at::native

namespace {

template <typename Function>
Function python_api(const char* name) {
  return reinterpret_cast<Function>(dlsym(RTLD_DEFAULT, name));
}

// pybind11's detail::get_internals() keeps the interpreter of the thread that imported the
// extension (internals.istate); gil_scoped_acquire creates new thread states in it.
void* g_interpreter = nullptr;

// pybind11::gil_scoped_acquire on a thread Python never saw: PyGILState_GetThisThreadState() is
// null, so PyThreadState_New(internals.istate), then PyEval_AcquireThread. gil_scoped_release:
// PyEval_SaveThread. The thread state stays bound to the thread.
void thread_init() {
  const auto this_thread_state = python_api<void* (*)()>("PyGILState_GetThisThreadState");
  const auto new_thread_state = python_api<void* (*)(void*)>("PyThreadState_New");
  const auto acquire_thread = python_api<void (*)(void*)>("PyEval_AcquireThread");
  const auto save_thread = python_api<void* (*)()>("PyEval_SaveThread");
  if (this_thread_state()) return;
  void* tstate = new_thread_state(g_interpreter);
  acquire_thread(tstate);
  save_thread();
}

// Engine::thread_main's ready queue, reduced to one task at a time: the calling thread waits for
// the task as GraphTask's owner waits for its outstanding tasks.
class DeviceThread {
 public:
  void run(std::function<void()> task) {
    std::call_once(started_, [this] {
      std::thread([this] {
        thread_init();
        serve();
      }).detach();  // as the engine's device threads: never joined
    });
    std::unique_lock lock(mutex_);
    task_ = std::move(task);
    done_ = false;
    changed_.notify_all();
    changed_.wait(lock, [this] { return done_; });
  }

 private:
  void serve() {
    for (;;) {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [this] { return static_cast<bool>(task_); });
      const std::function<void()> task = std::move(task_);
      task_ = nullptr;
      lock.unlock();
      task();
      lock.lock();
      done_ = true;
      changed_.notify_all();
    }
  }

  std::once_flag started_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> task_;
  bool done_ = false;
};

// Never destroyed: the thread waits on its condition variable until the process ends.
DeviceThread& device_thread() {
  static auto* thread = new DeviceThread;
  return *thread;
}

void syncs_on_device_thread(int syncs) {
  device_thread().run([syncs] {
    for (int i = 0; i < syncs; ++i) at::native::nonzero_cuda();
  });
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int engine_init() {
  if (cudaStreamCreate(&g_stream) != cudaSuccess) return 1;
  return cudaMalloc(&g_count, sizeof(int)) == cudaSuccess ? 0 : 1;
}

// Called with the GIL held (ctypes.PyDLL), as the import of torch._C runs get_internals().
__attribute__((visibility("default"))) void engine_import() {
  const auto current_thread_state = python_api<void* (*)()>("PyThreadState_Get");
  const auto interpreter_of = python_api<void* (*)(void*)>("PyThreadState_GetInterpreter");
  g_interpreter = interpreter_of(current_thread_state());
}

// THPEngine_run_backward (torch._C._EngineBase.run_backward), GIL released by ctypes as by
// pybind11::gil_scoped_release there: the device thread runs the graph, a backward op that syncs
// `syncs` times (the nonzero of a boolean-mask index's backward), while the caller waits.
__attribute__((visibility("default"))) void run_backward(int syncs) { syncs_on_device_thread(syncs); }

// The op on the calling thread, as a forward pass runs it.
__attribute__((visibility("default"))) long engine_nonzero() { return at::native::nonzero_cuda(); }

// The same work handed to the device thread by a caller that is not in backward.
__attribute__((visibility("default"))) void run_on_device_thread(int syncs) { syncs_on_device_thread(syncs); }

}  // extern "C"
