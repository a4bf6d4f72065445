// Mirrors torch/csrc/cuda/Module.cpp (THCPModule_*), Stream.cpp (THCPStream_*), Event.cpp
// (THCPEvent_*) and Graph.cpp (the _CUDAGraph methods): torch.cuda's native side.
#include "python_bindings.h"
#include "torchlike/c10_cuda.h"
#include "torchlike/cuda_event.h"

// As in torch/csrc/cuda: the bindings are global functions (static in Stream.cpp and Event.cpp).
using c10::cuda::CUDAStream;

static cudaStream_t stream_of(void* handle) { return static_cast<cudaStream_t>(handle); }

// Mirrors THCPModule_cudaSynchronize: c10::cuda::device_synchronize with the GIL released.
TORCHLIKE_FRAME int64_t THCPModule_cudaSynchronize() {
  HANDLE_TH_ERRORS
  c10::cuda::device_synchronize();
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}

// Mirrors THCPModule_emptyCache: CUDACachingAllocator::emptyCache (inline) -> the allocator.
TORCHLIKE_FRAME int64_t THCPModule_emptyCache() {
  HANDLE_TH_ERRORS
  c10::cuda::CUDACachingAllocator::emptyCache();
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}

// Mirrors THCPModule_setDevice_wrap / THCPModule_getDevice_wrap.
int64_t THCPModule_setDevice_wrap(int64_t device) {
  HANDLE_TH_ERRORS
  c10::cuda::set_device(static_cast<int>(device));
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}
int64_t THCPModule_getDevice_wrap() {
  HANDLE_TH_ERRORS
  return c10::cuda::current_device();
  END_HANDLE_TH_ERRORS(-1)
}

int64_t THCPModule_getDeviceCount_wrap() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

// Mirrors THCPModule_getCurrentStream_wrap / THCPModule_setStream_wrap.
void* THCPModule_getCurrentStream_wrap() { return c10::cuda::getCurrentCUDAStream().stream(); }
int64_t THCPModule_setStream_wrap(void* stream) {
  c10::cuda::setCurrentCUDAStream(CUDAStream(stream_of(stream)));
  return 0;
}

// Mirrors THCPStream_pynew: a stream from the pool.
static TORCHLIKE_FRAME void* THCPStream_pynew(int64_t priority) {
  HANDLE_TH_ERRORS
  return c10::cuda::getStreamFromPool(priority < 0).stream();
  END_HANDLE_TH_ERRORS(nullptr)
}

// Mirrors THCPStream_synchronize: CUDAStream::synchronize with the GIL released.
static TORCHLIKE_FRAME int64_t THCPStream_synchronize(void* stream) {
  HANDLE_TH_ERRORS
  CUDAStream(stream_of(stream)).synchronize();
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}

// Mirrors THCPStream_query: CUDAStream::query (cudaStreamQuery, a poll, not a wait).
static TORCHLIKE_FRAME int64_t THCPStream_query(void* stream) {
  HANDLE_TH_ERRORS
  return CUDAStream(stream_of(stream)).query() ? 1 : 0;
  END_HANDLE_TH_ERRORS(-1)
}

// Mirrors THCPEvent_pynew (the event itself is created at its first record).
static void* THCPEvent_pynew(int64_t enable_timing) {
  auto* event = new at::cuda::CUDAEvent;
  if (enable_timing) event->flags_ = cudaEventDefault;
  return event;
}
static void THCPEvent_dealloc(void* event) { delete static_cast<at::cuda::CUDAEvent*>(event); }

static TORCHLIKE_FRAME int64_t THCPEvent_record(void* event, void* stream) {
  HANDLE_TH_ERRORS
  static_cast<at::cuda::CUDAEvent*>(event)->record(CUDAStream(stream_of(stream)));
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}

// Mirrors THCPEvent_synchronize: the inline CUDAEvent::synchronize, so no CUDAEvent frame.
static TORCHLIKE_FRAME int64_t THCPEvent_synchronize(void* event) {
  HANDLE_TH_ERRORS
  static_cast<at::cuda::CUDAEvent*>(event)->synchronize();
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}

static TORCHLIKE_FRAME int64_t THCPEvent_query(void* event) {
  HANDLE_TH_ERRORS
  return static_cast<at::cuda::CUDAEvent*>(event)->query() ? 1 : 0;
  END_HANDLE_TH_ERRORS(-1)
}

// Mirrors THCPEvent_wait: the stream waits for the event on the device (CUDAEvent::block).
static TORCHLIKE_FRAME int64_t THCPEvent_wait(void* event, void* stream) {
  HANDLE_TH_ERRORS
  static_cast<at::cuda::CUDAEvent*>(event)->block(CUDAStream(stream_of(stream)));
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}

// The _CUDAGraph methods (pybind11 in Graph.cpp, bound to at::cuda::CUDAGraph).
static void* THCPGraph_new() { return new at::cuda::CUDAGraph; }
static void THCPGraph_dealloc(void* graph) { delete static_cast<at::cuda::CUDAGraph*>(graph); }
static TORCHLIKE_FRAME int64_t THCPGraph_capture_begin(void* graph, int64_t mode) {
  HANDLE_TH_ERRORS
  static_cast<at::cuda::CUDAGraph*>(graph)->capture_begin(static_cast<cudaStreamCaptureMode>(mode));
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}
static TORCHLIKE_FRAME int64_t THCPGraph_capture_end(void* graph) {
  HANDLE_TH_ERRORS
  static_cast<at::cuda::CUDAGraph*>(graph)->capture_end();
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}
static TORCHLIKE_FRAME int64_t THCPGraph_replay(void* graph) {
  HANDLE_TH_ERRORS
  static_cast<at::cuda::CUDAGraph*>(graph)->replay();
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}

namespace torch {

namespace {
const MethodDef cuda_methods[] = {
    {"_cuda_synchronize", "l:", reinterpret_cast<void*>(THCPModule_cudaSynchronize)},
    {"_cuda_emptyCache", "l:", reinterpret_cast<void*>(THCPModule_emptyCache)},
    {"_cuda_getDeviceCount", "l:", reinterpret_cast<void*>(THCPModule_getDeviceCount_wrap)},
    {"_cuda_setDevice", "l:l", reinterpret_cast<void*>(THCPModule_setDevice_wrap)},
    {"_cuda_getDevice", "l:", reinterpret_cast<void*>(THCPModule_getDevice_wrap)},
    {"_cuda_getCurrentStream", "p:", reinterpret_cast<void*>(THCPModule_getCurrentStream_wrap)},
    {"_cuda_setStream", "l:p", reinterpret_cast<void*>(THCPModule_setStream_wrap)},
    {"stream_new", "p:l", reinterpret_cast<void*>(THCPStream_pynew)},
    {"stream_synchronize", "l:p", reinterpret_cast<void*>(THCPStream_synchronize)},
    {"stream_query", "l:p", reinterpret_cast<void*>(THCPStream_query)},
    {"event_new", "p:l", reinterpret_cast<void*>(THCPEvent_pynew)},
    {"event_dealloc", "v:p", reinterpret_cast<void*>(THCPEvent_dealloc)},
    {"event_record", "l:pp", reinterpret_cast<void*>(THCPEvent_record)},
    {"event_synchronize", "l:p", reinterpret_cast<void*>(THCPEvent_synchronize)},
    {"event_query", "l:p", reinterpret_cast<void*>(THCPEvent_query)},
    {"event_wait", "l:pp", reinterpret_cast<void*>(THCPEvent_wait)},
    {"graph_new", "p:", reinterpret_cast<void*>(THCPGraph_new)},
    {"graph_dealloc", "v:p", reinterpret_cast<void*>(THCPGraph_dealloc)},
    {"graph_capture_begin", "l:pl", reinterpret_cast<void*>(THCPGraph_capture_begin)},
    {"graph_capture_end", "l:p", reinterpret_cast<void*>(THCPGraph_capture_end)},
    {"graph_replay", "l:p", reinterpret_cast<void*>(THCPGraph_replay)},
    {nullptr, nullptr, nullptr},
};
const RegisterMethods register_cuda_methods(cuda_methods);
}  // namespace

}  // namespace torch
