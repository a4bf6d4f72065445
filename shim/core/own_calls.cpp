#include "own_calls.hpp"

#include "resolve.hpp"

namespace trainshim::shim {

namespace {

struct Runtime {
  cudaError_t (*peek)();
  cudaError_t (*get_last)();
  cudaError_t (*exchange_mode)(cudaStreamCaptureMode*);
  cudaError_t (*is_capturing)(cudaStream_t, cudaStreamCaptureStatus*);
};

const Runtime* runtime() {
  static const Runtime functions = [] {
    auto get = [](const char* name) { return runtime_function(Library::Cudart, name); };
    return Runtime{reinterpret_cast<decltype(Runtime::peek)>(get("cudaPeekAtLastError")),
                   reinterpret_cast<decltype(Runtime::get_last)>(get("cudaGetLastError")),
                   reinterpret_cast<decltype(Runtime::exchange_mode)>(get("cudaThreadExchangeStreamCaptureMode")),
                   reinterpret_cast<decltype(Runtime::is_capturing)>(get("cudaStreamIsCapturing"))};
  }();
  const bool complete = functions.peek && functions.get_last && functions.exchange_mode && functions.is_capturing;
  return complete ? &functions : nullptr;
}

}  // namespace

OwnCalls::OwnCalls() {
  const Runtime* rt = runtime();
  if (!rt || rt->peek() != cudaSuccess) return;
  if (rt->exchange_mode(&previous_) != cudaSuccess) {
    rt->get_last();
    return;
  }
  allowed_ = true;
}

OwnCalls::~OwnCalls() {
  if (!allowed_) return;
  const Runtime& rt = *runtime();
  rt.exchange_mode(&previous_);
  if (failed_) rt.get_last();
}

bool OwnCalls::capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  // cudaErrorStreamCaptureImplicit: the legacy stream while a blocking stream of its device captures.
  if (check(runtime()->is_capturing(stream, &status)) != cudaSuccess) return true;
  return status != cudaStreamCaptureStatusNone;
}

void relax_this_thread() {
  const Runtime* rt = runtime();
  if (!rt) return;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (rt->exchange_mode(&mode) != cudaSuccess) rt->get_last();
}

}  // namespace trainshim::shim
