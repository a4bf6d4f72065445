// The CUDA runtime API of the simulation, compiled against the real headers so that every
// signature matches; exported with the version libcudart.so.13 (see cudart.map).
#include "driver_link.h"
#include "internal.h"
#include "simcuda.h"

#include <unistd.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <tuple>
#include <vector>

// Per-thread-default-stream twins; the header declares them only when a program is compiled
// with CUDA_API_PER_THREAD_DEFAULT_STREAM, but the real library always exports them.
extern "C" {
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                                 cudaStream_t stream);
cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                   size_t height, enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count, cudaStream_t stream);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);
cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t count, size_t offset,
                                    enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t count, size_t offset,
                                         enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpyFromSymbol_ptds(void* dst, const void* symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* symbol, size_t count, size_t offset,
                                           enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms* p);
cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms* p, cudaStream_t stream);
cudaError_t cudaMemcpyBatchAsync_ptsz(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                                      struct cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                      cudaStream_t stream);
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus* pCaptureStatus);
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* userData);
}

namespace simcuda {

int device_count() {
  // Read once, lazily: SIMCUDA_DEVICES simulates a multi-GPU node.
  static const int count = [] {
    const char* env = std::getenv("SIMCUDA_DEVICES");
    int n = env ? std::atoi(env) : 1;
    return n < 1 ? 1 : (n > 64 ? 64 : n);
  }();
  return count;
}

namespace {
thread_local int tls_device = 0;
thread_local cudaError_t tls_last_error = cudaSuccess;
}  // namespace

int currentDevice() { return tls_device; }

namespace {
std::atomic<std::uint64_t> used_devices{0};  // bit d: device d's primary context is active
}  // namespace

bool device_used(int device) { return (used_devices.load() >> device) & 1u; }
void mark_device_used(int device) { used_devices.fetch_or(std::uint64_t{1} << device); }

// Distinct, never dereferenced: a context is only compared and passed back here.
CUctx_st* primary_context(int device) {
  static char contexts[64];
  return reinterpret_cast<CUctx_st*>(&contexts[device]);
}

cudaError_t record_error(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorNotReady) tls_last_error = e;
  return e;
}

}  // namespace simcuda

using namespace simcuda;

namespace {

cudaError_t ret(cudaError_t e) { return record_error(e); }

bool valid_kind(cudaMemcpyKind k) { return k >= cudaMemcpyHostToHost && k <= cudaMemcpyDefault; }

// Host code waits for async work touching pageable host memory: H2D is staged (the bytes are
// taken from the host buffer before the call returns), D2H must land before the call returns.
bool touches_pageable(const void* a, const void* b) { return is_pageable(a) || is_pageable(b); }

}  // namespace

// A captured operation never runs at the call, so the call never waits for it.
cudaError_t simcuda::submit(cudaStream_t stream, std::function<void()> op, bool wait, std::optional<Traced> as) {
  auto s = resolve_stream(stream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  std::uint64_t ticket = 0;
  Work work = [op = std::move(op), as = std::move(as)](const Stream& on) { return as ? traced(on, *as, op) : op; };
  if (const cudaError_t e = submit_work(s, std::move(work), &ticket); e != cudaSuccess) return e;
  if (wait && ticket) s->wait_ticket(ticket);
  return cudaSuccess;
}

simcuda::Traced simcuda::memcpy_activity(const void* dst, const void* src, std::uint64_t bytes, bool async,
                                         std::uint64_t copies) {
  Traced t;
  t.activity.kind = SIMCUDA_ACTIVITY_MEMCPY;
  t.activity.bytes = bytes;
  t.activity.src = memory_kind(src);
  t.activity.dst = memory_kind(dst);
  t.activity.copy_count = copies;
  t.activity.async = async;
  return t;
}

namespace {

// Synchronous copies and memsets are potentially unsafe during a capture, like every call that
// waits for the device.
cudaError_t submit_and_wait(cudaStream_t stream, std::function<void()> op, Traced as) {
  if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return e;
  return submit(stream, std::move(op), true, std::move(as));
}

// A kernel of the simulation's own (no registered function), one block of one thread.
Traced kernel_activity(std::string name) {
  Traced t;
  t.activity.kind = SIMCUDA_ACTIVITY_KERNEL;
  t.activity.grid = dim3(1);
  t.activity.block = dim3(1);
  t.name = std::move(name);
  return t;
}

cudaError_t copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream, bool sync) {
  if (!valid_kind(kind)) return ret(cudaErrorInvalidMemcpyDirection);
  if (n == 0) return cudaSuccess;
  if (!dst || !src) return ret(cudaErrorInvalidValue);
  auto op = [dst, src, n] { std::memmove(dst, src, n); };
  Traced as = memcpy_activity(dst, src, n, !sync);
  return sync ? submit_and_wait(stream, op, std::move(as))
              : submit(stream, op, touches_pageable(dst, src), std::move(as));
}

// libcudart's synchronous linear copy is the driver's cuMemcpy (its _ptds twin for the per-thread
// stream), called through the table the runtime took from cuGetProcAddress (driver_link.cpp).
cudaError_t copy_through_driver(void* dst, const void* src, size_t n, cudaMemcpyKind kind, bool per_thread) {
  const Driver* d = driver();
  if (!d) return copy(dst, src, n, kind, per_thread ? cudaStreamPerThread : cudaStreamLegacy, true);
  if (!valid_kind(kind)) return ret(cudaErrorInvalidMemcpyDirection);
  if (n == 0) return cudaSuccess;
  if (!dst || !src) return ret(cudaErrorInvalidValue);
  const auto to = reinterpret_cast<std::uintptr_t>(dst), from = reinterpret_cast<std::uintptr_t>(src);
  return ret(static_cast<cudaError_t>((per_thread ? d->memcpy_ptds : d->memcpy)(to, from, n)));
}

cudaError_t copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                    cudaMemcpyKind kind, cudaStream_t stream, bool sync) {
  if (!valid_kind(kind)) return ret(cudaErrorInvalidMemcpyDirection);
  if (width > dpitch || width > spitch) return ret(cudaErrorInvalidPitchValue);
  if (width == 0 || height == 0) return cudaSuccess;
  if (!dst || !src) return ret(cudaErrorInvalidValue);
  auto op = [=] {
    for (size_t row = 0; row < height; ++row)
      std::memmove(static_cast<char*>(dst) + row * dpitch, static_cast<const char*>(src) + row * spitch, width);
  };
  Traced as = memcpy_activity(dst, src, std::uint64_t{width} * height, !sync);
  return sync ? submit_and_wait(stream, op, std::move(as))
              : submit(stream, op, touches_pageable(dst, src), std::move(as));
}

// A __device__ variable's symbol is the address the runtime maps to its device copy; here device
// memory stands in for it, so a symbol is an address inside a cudaMalloc'ed range.
cudaError_t copy_symbol(void* dst, const void* src, const void* symbol, size_t count, size_t offset,
                        cudaMemcpyKind kind, bool to_symbol, cudaStream_t stream, bool sync) {
  auto r = find_range(symbol);
  if (!r || r->kind != MemKind::Device) return ret(cudaErrorInvalidSymbol);
  const auto base = reinterpret_cast<std::uintptr_t>(symbol);
  if (base + offset + count > r->base + r->size) return ret(cudaErrorInvalidValue);
  // "kind can be either cudaMemcpyHostToDevice, cudaMemcpyDeviceToDevice, or cudaMemcpyDefault" (and
  // DeviceToHost for FromSymbol).
  const cudaMemcpyKind across = to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  if (kind != across && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
    return ret(cudaErrorInvalidMemcpyDirection);
  void* at = reinterpret_cast<void*>(base + offset);
  return to_symbol ? copy(at, src, count, kind, stream, sync) : copy(dst, at, count, kind, stream, sync);
}

// Copies between pointers only: CUDA arrays are not simulated.
cudaError_t copy_3d(const cudaMemcpy3DParms* p, cudaStream_t stream, bool sync) {
  if (!p || p->srcArray || p->dstArray || !p->srcPtr.ptr || !p->dstPtr.ptr) return ret(cudaErrorInvalidValue);
  if (!valid_kind(p->kind)) return ret(cudaErrorInvalidMemcpyDirection);
  const cudaExtent e = p->extent;
  if (e.width > p->srcPtr.pitch || e.width > p->dstPtr.pitch) return ret(cudaErrorInvalidPitchValue);
  if (e.width == 0 || e.height == 0 || e.depth == 0) return cudaSuccess;
  auto row = [](const cudaPitchedPtr& ptr, const cudaPos& pos, size_t y, size_t z) {
    return static_cast<char*>(ptr.ptr) + ((pos.z + z) * ptr.ysize + pos.y + y) * ptr.pitch + pos.x;
  };
  const cudaMemcpy3DParms q = *p;
  auto op = [q, row] {
    for (size_t z = 0; z < q.extent.depth; ++z)
      for (size_t y = 0; y < q.extent.height; ++y)
        std::memmove(row(q.dstPtr, q.dstPos, y, z), row(q.srcPtr, q.srcPos, y, z), q.extent.width);
  };
  void* first_dst = row(q.dstPtr, q.dstPos, 0, 0);
  const void* first_src = row(q.srcPtr, q.srcPos, 0, 0);
  Traced as = memcpy_activity(first_dst, first_src, std::uint64_t{e.width} * e.height * e.depth, !sync);
  return sync ? submit_and_wait(stream, op, std::move(as))
              : submit(stream, op, touches_pageable(first_dst, first_src), std::move(as));
}

// cudaMemcpyBatchAsync's checks: attrsIdxs starts at 0 and increases, below count; every
// attribute names a source access order; never the legacy stream.
cudaError_t copy_batch(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                       const cudaMemcpyAttributes* attrs, const size_t* attrsIdxs, size_t numAttrs,
                       cudaStream_t stream) {
  if (!dsts || !srcs || !sizes || count == 0 || !attrs || !attrsIdxs || numAttrs == 0 || numAttrs > count ||
      attrsIdxs[0] != 0 || stream == nullptr || stream == cudaStreamLegacy)
    return ret(cudaErrorInvalidValue);
  bool wait = false;
  for (size_t k = 0; k < numAttrs; ++k) {
    if ((k > 0 && attrsIdxs[k] <= attrsIdxs[k - 1]) || attrsIdxs[k] >= count) return ret(cudaErrorInvalidValue);
    if (attrs[k].srcAccessOrder == cudaMemcpySrcAccessOrderInvalid ||
        attrs[k].srcAccessOrder > cudaMemcpySrcAccessOrderAny)
      return ret(cudaErrorInvalidValue);
    wait = wait || attrs[k].srcAccessOrder == cudaMemcpySrcAccessOrderDuringApiCall;
  }
  std::vector<std::tuple<void*, const void*, size_t>> copies;
  std::uint64_t bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!dsts[i] || !srcs[i]) return ret(cudaErrorInvalidValue);
    copies.emplace_back(dsts[i], srcs[i], sizes[i]);
    bytes += sizes[i];
    wait = wait || touches_pageable(dsts[i], srcs[i]);
  }
  // One record for the batch, its copyCount the number of copies (CUpti_ActivityMemcpy6), with
  // the memory kinds of the first copy.
  return submit(
      stream,
      [copies] {
        for (const auto& [dst, src, n] : copies) std::memmove(dst, src, n);
      },
      wait, memcpy_activity(dsts[0], srcs[0], bytes, true, count));
}

cudaError_t fill(void* p, int value, size_t n, cudaStream_t stream, bool async) {
  if (n == 0) return cudaSuccess;
  auto r = find_range(p);
  if (!r) return ret(cudaErrorInvalidValue);
  // The real cudaMemset is asynchronous unless it writes host memory.
  auto op = [p, value, n] { std::memset(p, value, n); };
  Traced as;
  as.activity.kind = SIMCUDA_ACTIVITY_MEMSET;
  as.activity.bytes = n;
  as.activity.dst = memory_kind(p);
  as.activity.value = static_cast<std::uint32_t>(value);
  as.activity.async = async;
  return r->kind != MemKind::Device && !async ? submit_and_wait(stream, op, std::move(as))
                                              : submit(stream, op, false, std::move(as));
}

void* allocate_aligned(size_t alignment, size_t size) {
  void* p = nullptr;
  if (posix_memalign(&p, alignment, size ? size : 1) != 0) return nullptr;
  return p;
}

// Querying or waiting for an event whose last record went into a capture is never permitted; any
// other event query is a potentially unsafe call.
cudaError_t check_event_wait(Event& e) {
  std::uint64_t captured_in;
  {
    std::lock_guard lock(e.mu);
    captured_in = e.captured_in;
  }
  if (captured_in) {
    if (auto capture = active_capture(captured_in)) invalidate(*capture);
    return ret(cudaErrorCapturedEvent);
  }
  return check_potentially_unsafe();
}

}  // namespace

extern "C" {

// ---------------- devices and errors ----------------

// The runtime initialises the driver (cuInit) at its first device query, as the real one does:
// code that then calls libcuda.so.1 directly (PyTorch's libcaffe2_nvrtc.so) finds it initialised.
cudaError_t cudaGetDeviceCount(int* count) {
  driver();
  if (!count) return ret(cudaErrorInvalidValue);
  *count = device_count();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  driver();
  if (device < 0 || device >= device_count()) return ret(cudaErrorInvalidDevice);
  tls_device = device;
  mark_device_used(device);  // since CUDA 12, cudaSetDevice initialises the primary context
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return ret(cudaErrorInvalidValue);
  *device = tls_device;
  return cudaSuccess;
}

// The real one writes "[domain]:[bus]:[device].[function]" in hexadecimal, upper case
// ("0000:3B:00.0": NCCL's getPciPath lowers it before looking in sysfs), truncated to `len`
// with its terminator. Each simulated device sits on a bus of its own.
cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (!pciBusId || len <= 0) return ret(cudaErrorInvalidValue);
  if (device < 0 || device >= device_count()) return ret(cudaErrorInvalidDevice);
  char text[16];
  std::snprintf(text, sizeof text, "0000:%02X:00.0", (0x3B + 0x11 * device) & 0xFF);
  std::snprintf(pciBusId, static_cast<std::size_t>(len), "%s", text);
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = tls_last_error;
  tls_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return tls_last_error; }

#define SIMCUDA_ERRORS(X)                                                                                           \
  X(cudaSuccess, "no error")                                                                                        \
  X(cudaErrorInvalidValue, "invalid argument")                                                                      \
  X(cudaErrorInvalidConfiguration, "invalid configuration argument")                                                \
  X(cudaErrorInvalidDeviceFunction, "invalid device function")                                                      \
  X(cudaErrorMemoryAllocation, "out of memory")                                                                     \
  X(cudaErrorInitializationError, "initialization error")                                                           \
  X(cudaErrorInvalidPitchValue, "invalid pitch argument")                                                           \
  X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")                                           \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                                                               \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                                                        \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                                                      \
  X(cudaErrorNotReady, "device not ready")                                                                          \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")                                            \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                                                           \
  X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped")            \
  X(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region")                  \
  X(cudaErrorNotSupported, "operation not supported")                                                               \
  X(cudaErrorIllegalState, "the operation cannot be performed in the present state")                                \
  X(cudaErrorInvalidSymbol, "invalid device symbol")                                                                \
  X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")                          \
  X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture")                   \
  X(cudaErrorStreamCaptureUnmatched, "capture was not initiated in this stream")                                    \
  X(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream")                     \
  X(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream") \
  X(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream")              \
  X(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread")  \
  X(cudaErrorUnknown, "unknown error")

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
#define SIMCUDA_STRING(code, text) \
  case code:                       \
    return text;
    SIMCUDA_ERRORS(SIMCUDA_STRING)
#undef SIMCUDA_STRING
    default:
      return "unrecognized error code";
  }
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define SIMCUDA_NAME(code, text) \
  case code:                     \
    return #code;
    SIMCUDA_ERRORS(SIMCUDA_NAME)
#undef SIMCUDA_NAME
    default:
      return "unrecognized error code";
  }
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return ret(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return ret(cudaErrorInvalidValue);
  if (const Driver* d = driver()) return ret(static_cast<cudaError_t>(d->driver_get_version(version)));
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  return api_call(
      CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
      [&]() -> cudaError_t {
        if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return e;
        if (const cudaError_t e = check_device_wait(tls_device); e != cudaSuccess) return e;
        synchronize_device(tls_device);
        return cudaSuccess;
      },
      ApiSync{SIMCUDA_SYNC_DEVICE, tls_device});
}

// ---------------- memory ----------------

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, [&]() -> cudaError_t {
    if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return e;
    if (!devPtr) return ret(cudaErrorInvalidValue);
    if (size == 0) {
      *devPtr = nullptr;
      return cudaSuccess;
    }
    void* p = allocate_aligned(256, size);  // cudaMalloc guarantees at least 256-byte alignment
    if (!p) return ret(cudaErrorMemoryAllocation);
    // Zeroed: no simulated kernel writes its output, so a count a framework reads back from a fresh
    // buffer (nonzero's, unique's) is 0, never garbage that sizes the next allocation.
    std::memset(p, 0, size);
    mark_device_used(tls_device);
    register_range({reinterpret_cast<std::uintptr_t>(p), size, MemKind::Device, tls_device});
    *devPtr = p;
    return cudaSuccess;
  });
}

// Stream-ordered allocation: the memory is usable by work queued after the call, and freed once
// the work queued before cudaFreeAsync has run; neither call waits.
cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, [&]() -> cudaError_t {
    if (!resolve_stream(hStream)) return ret(cudaErrorInvalidResourceHandle);
    return cudaMalloc(devPtr, size);
  });
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020, [&]() -> cudaError_t {
    if (!devPtr) return cudaSuccess;
    auto r = find_range(devPtr);
    if (!r || r->kind != MemKind::Device || r->base != reinterpret_cast<std::uintptr_t>(devPtr))
      return ret(cudaErrorInvalidValue);
    return submit(
        hStream,
        [devPtr] {
          unregister_range(reinterpret_cast<std::uintptr_t>(devPtr));
          std::free(devPtr);
        },
        false);
  });
}

cudaError_t cudaFree(void* devPtr) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, [&]() -> cudaError_t {
    if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return e;
    if (!devPtr) return cudaSuccess;
    auto r = find_range(devPtr);
    if (!r || r->kind != MemKind::Device || r->base != reinterpret_cast<std::uintptr_t>(devPtr))
      return ret(cudaErrorInvalidValue);
    if (const cudaError_t e = check_device_wait(r->device); e != cudaSuccess) return e;
    // The real cudaFree synchronises the device before releasing memory.
    synchronize_device(r->device);
    unregister_range(r->base);
    std::free(devPtr);
    return cudaSuccess;
  });
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, [&]() -> cudaError_t {
    (void)flags;
    if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return e;
    if (!pHost) return ret(cudaErrorInvalidValue);
    void* p = allocate_aligned(static_cast<size_t>(sysconf(_SC_PAGESIZE)), size);
    if (!p) return ret(cudaErrorMemoryAllocation);
    register_range({reinterpret_cast<std::uintptr_t>(p), size, MemKind::PinnedAlloc, tls_device});
    *pHost = p;
    return cudaSuccess;
  });
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020);
  return call.returned(cudaHostAlloc(ptr, size, cudaHostAllocDefault));
}

cudaError_t cudaFreeHost(void* ptr) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, [&]() -> cudaError_t {
    if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return e;
    if (!ptr) return cudaSuccess;
    auto r = find_range(ptr);
    if (!r || r->kind != MemKind::PinnedAlloc || r->base != reinterpret_cast<std::uintptr_t>(ptr))
      return ret(cudaErrorInvalidValue);
    synchronize_device(r->device);
    unregister_range(r->base);
    std::free(ptr);
    return cudaSuccess;
  });
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaHostRegister_v4000, [&]() -> cudaError_t {
    (void)flags;
    if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return e;
    if (!ptr || size == 0) return ret(cudaErrorInvalidValue);
    auto base = reinterpret_cast<std::uintptr_t>(ptr);
    if (overlaps_any(base, size)) return ret(cudaErrorHostMemoryAlreadyRegistered);
    register_range({base, size, MemKind::PinnedRegistered, tls_device});
    return cudaSuccess;
  });
}

cudaError_t cudaHostUnregister(void* ptr) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaHostUnregister_v4000, [&]() -> cudaError_t {
    if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return e;
    auto r = find_range(ptr);
    if (!r || r->kind != MemKind::PinnedRegistered || r->base != reinterpret_cast<std::uintptr_t>(ptr))
      return ret(cudaErrorHostMemoryNotRegistered);
    unregister_range(r->base);
    return cudaSuccess;
  });
}

cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  (void)flags;
  if (!pDevice) return ret(cudaErrorInvalidValue);
  auto r = find_range(pHost);
  if (!r || r->kind == MemKind::Device) return ret(cudaErrorInvalidValue);
  *pDevice = pHost;  // unified addressing: the same address on both sides
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return e;
  if (!attributes) return ret(cudaErrorInvalidValue);
  std::memset(attributes, 0, sizeof(*attributes));
  auto r = find_range(ptr);
  void* p = const_cast<void*>(ptr);
  if (!r) {
    // Pageable or unknown memory: success, as in CUDA 11 and later.
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = cudaInvalidDeviceId;
    attributes->hostPointer = p;
    return cudaSuccess;
  }
  attributes->device = r->device;
  attributes->devicePointer = p;
  if (r->kind == MemKind::Device) {
    attributes->type = cudaMemoryTypeDevice;
  } else {
    attributes->type = cudaMemoryTypeHost;
    attributes->hostPointer = p;
  }
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (!free || !total) return ret(cudaErrorInvalidValue);
  *total = simulated_memory_bytes();
  *free = *total;
  return cudaSuccess;
}

// ---------------- copies and memset ----------------

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020);
  return call.returned(copy_through_driver(dst, src, count, kind, false));
}
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000);
  return call.returned(copy_through_driver(dst, src, count, kind, true));
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020);
  return call.returned(copy(dst, src, count, kind, stream, false));
}
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                                 cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000);
  return call.returned(copy(dst, src, count, kind, stream ? stream : cudaStreamPerThread, false));
}
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020);
  return call.returned(copy_2d(dst, dpitch, src, spitch, width, height, kind, cudaStreamLegacy, true));
}
cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_ptds_v7000);
  return call.returned(copy_2d(dst, dpitch, src, spitch, width, height, kind, cudaStreamPerThread, true));
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020);
  return call.returned(copy_2d(dst, dpitch, src, spitch, width, height, kind, stream, false));
}
cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                   size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_ptsz_v7000);
  return call.returned(
      copy_2d(dst, dpitch, src, spitch, width, height, kind, stream ? stream : cudaStreamPerThread, false));
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                               enum cudaMemcpyKind kind) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_v3020);
  return call.returned(copy_symbol(nullptr, src, symbol, count, offset, kind, true, cudaStreamLegacy, true));
}
cudaError_t cudaMemcpyToSymbol_ptds(const void* symbol, const void* src, size_t count, size_t offset,
                                    enum cudaMemcpyKind kind) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_ptds_v7000);
  return call.returned(copy_symbol(nullptr, src, symbol, count, offset, kind, true, cudaStreamPerThread, true));
}
cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count, size_t offset,
                                    enum cudaMemcpyKind kind, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_v3020);
  return call.returned(copy_symbol(nullptr, src, symbol, count, offset, kind, true, stream, false));
}
cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* symbol, const void* src, size_t count, size_t offset,
                                         enum cudaMemcpyKind kind, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_ptsz_v7000);
  return call.returned(
      copy_symbol(nullptr, src, symbol, count, offset, kind, true, stream ? stream : cudaStreamPerThread, false));
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset, enum cudaMemcpyKind kind) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_v3020);
  return call.returned(copy_symbol(dst, nullptr, symbol, count, offset, kind, false, cudaStreamLegacy, true));
}
cudaError_t cudaMemcpyFromSymbol_ptds(void* dst, const void* symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_ptds_v7000);
  return call.returned(copy_symbol(dst, nullptr, symbol, count, offset, kind, false, cudaStreamPerThread, true));
}
cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_v3020);
  return call.returned(copy_symbol(dst, nullptr, symbol, count, offset, kind, false, stream, false));
}
cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* dst, const void* symbol, size_t count, size_t offset,
                                           enum cudaMemcpyKind kind, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_ptsz_v7000);
  return call.returned(
      copy_symbol(dst, nullptr, symbol, count, offset, kind, false, stream ? stream : cudaStreamPerThread, false));
}

cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms* p) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_v3020);
  return call.returned(copy_3d(p, cudaStreamLegacy, true));
}
cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms* p) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_ptds_v7000);
  return call.returned(copy_3d(p, cudaStreamPerThread, true));
}
cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms* p, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_v3020);
  return call.returned(copy_3d(p, stream, false));
}
cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms* p, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_ptsz_v7000);
  return call.returned(copy_3d(p, stream ? stream : cudaStreamPerThread, false));
}

cudaError_t cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                                 struct cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                 cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v13000);
  return call.returned(copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream));
}
cudaError_t cudaMemcpyBatchAsync_ptsz(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                                      struct cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                      cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_ptsz_v13000);
  return call.returned(
      copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream ? stream : cudaStreamPerThread));
}

cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeer_v4000, [&]() -> cudaError_t {
    if (dstDevice < 0 || dstDevice >= device_count() || srcDevice < 0 || srcDevice >= device_count())
      return ret(cudaErrorInvalidDevice);
    // Asynchronous to the host, serialised with the current device's work (as documented).
    return copy(dst, src, count, cudaMemcpyDeviceToDevice, cudaStreamLegacy, false);
  });
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                cudaStream_t stream) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000, [&]() -> cudaError_t {
    if (dstDevice < 0 || dstDevice >= device_count() || srcDevice < 0 || srcDevice >= device_count())
      return ret(cudaErrorInvalidDevice);
    return copy(dst, src, count, cudaMemcpyDeviceToDevice, stream, false);
  });
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020);
  return call.returned(fill(devPtr, value, count, cudaStreamLegacy, false));
}
cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000);
  return call.returned(fill(devPtr, value, count, cudaStreamPerThread, false));
}
cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020);
  return call.returned(fill(devPtr, value, count, stream, true));
}
cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000);
  return call.returned(fill(devPtr, value, count, stream ? stream : cudaStreamPerThread, true));
}

// ---------------- streams ----------------

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  if (!pStream || (flags & ~cudaStreamNonBlocking)) return ret(cudaErrorInvalidValue);
  *pStream = create_stream(tls_device, flags, priority);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return cudaStreamCreateWithPriority(pStream, flags, 0);
}
cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  return cudaStreamCreateWithPriority(pStream, cudaStreamDefault, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!destroy_stream(stream)) return ret(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  auto s = resolve_stream(hStream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (!flags) return ret(cudaErrorInvalidValue);
  *flags = s->flags();
  return cudaSuccess;
}

cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int* device) {
  auto s = resolve_stream(hStream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (!device) return ret(cudaErrorInvalidValue);
  *device = s->device();
  return cudaSuccess;
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  auto s = resolve_stream(hStream);
  if (!s) return ret(cudaErrorInvalidResourceHandle);
  if (!priority) return ret(cudaErrorInvalidValue);
  *priority = s->priority();
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return api_call(
      CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
      [&]() -> cudaError_t {
        if (const Driver* d = driver()) return ret(static_cast<cudaError_t>(d->stream_synchronize(stream)));
        auto s = resolve_stream(stream);
        if (!s) return ret(cudaErrorInvalidResourceHandle);
        if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return e;
        if (const cudaError_t e = check_wait_on(s); e != cudaSuccess) return e;
        s->wait_ticket(s->last_ticket());
        return cudaSuccess;
      },
      stream_sync(stream, SIMCUDA_SYNC_STREAM));
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  return api_call(
      CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000,
      [&]() -> cudaError_t {
        if (const Driver* d = driver()) return ret(static_cast<cudaError_t>(d->stream_synchronize_ptsz(stream)));
        return cudaStreamSynchronize(stream ? stream : cudaStreamPerThread);
      },
      stream_sync(stream ? stream : cudaStreamPerThread, SIMCUDA_SYNC_STREAM));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaStreamQuery_v3020, [&]() -> cudaError_t {
    auto s = resolve_stream(stream);
    if (!s) return ret(cudaErrorInvalidResourceHandle);
    if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return e;
    if (const cudaError_t e = check_wait_on(s); e != cudaSuccess) return e;
    return s->idle() ? cudaSuccess : cudaErrorNotReady;  // NotReady is not recorded as an error
  });
}
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaStreamQuery_ptsz_v7000);
  return call.returned(cudaStreamQuery(stream ? stream : cudaStreamPerThread));
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return api_call(
      CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020,
      [&]() -> cudaError_t {
        (void)flags;
        auto s = resolve_stream(stream);
        auto e = resolve_event(event);
        if (!s || !e) return ret(cudaErrorInvalidResourceHandle);
        std::uint64_t seq;
        {
          std::lock_guard lock(e->mu);
          seq = e->recorded;
        }
        if (seq == 0) return cudaSuccess;  // never recorded: nothing to wait for
        auto capture = capture_of(*s);
        const bool captured_event = e->captured_in != 0;
        if (capture && captured_event && e->captured_in == capture->id) return cudaSuccess;  // ordered in the graph
        if (capture || captured_event) {
          // A capturing stream may not wait on work outside its capture; a stream that waits on a
          // captured event would join the capture, which is not simulated.
          if (capture) invalidate(*capture);
          return ret(cudaErrorStreamCaptureIsolation);
        }
        std::uint64_t ticket = 0;
        return submit_work(
            s,
            [e, seq](const Stream&) {
              return std::function<void()>([e, seq] {
                std::unique_lock lock(e->mu);
                e->cv.wait(lock, [&] { return e->done >= seq; });
                gpu_at_least(e->stamp);
              });
            },
            &ticket);
      },
      stream_sync(stream, SIMCUDA_SYNC_STREAM_WAIT_EVENT, event));
}
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_ptsz_v7000,
               stream_sync(stream ? stream : cudaStreamPerThread, SIMCUDA_SYNC_STREAM_WAIT_EVENT, event));
  return call.returned(cudaStreamWaitEvent(stream ? stream : cudaStreamPerThread, event, flags));
}

cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus* pCaptureStatus) {
  return cudaStreamIsCapturing(stream ? stream : cudaStreamPerThread, pCaptureStatus);
}

// ---------------- events ----------------

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (!event) return ret(cudaErrorInvalidValue);
  *event = create_event(flags, tls_device);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!destroy_event(event)) return ret(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

// An event belongs to the device that was current when it was created: "event and stream must be
// on the same CUDA context" (cudaEventRecord).
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020, [&]() -> cudaError_t {
    auto e = resolve_event(event);
    auto s = resolve_stream(stream);
    if (!e || !s || e->device != s->device()) return ret(cudaErrorInvalidResourceHandle);
    auto capture = capture_of(*s);
    // Made at each launch: a record in a graph records the event anew every time it runs.
    Work record = [e](const Stream&) {
      std::uint64_t seq;
      {
        std::lock_guard lock(e->mu);
        seq = ++e->recorded;
        e->captured_in = 0;
      }
      // The timestamp is the GPU's time when the stream's worker reaches the event, like the GPU's.
      return std::function<void()>([e, seq] {
        auto now = gpu_now();
        std::lock_guard lock(e->mu);
        if (seq > e->done) {
          e->done = seq;
          e->stamp = now;
        }
        e->cv.notify_all();
      });
    };
    std::uint64_t ticket = 0;
    const cudaError_t status = submit_work(s, std::move(record), &ticket);
    if (status == cudaSuccess && capture) {
      std::lock_guard lock(e->mu);
      e->captured_in = capture->id;
    }
    return status;
  });
}
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_ptsz_v7000);
  return call.returned(cudaEventRecord(event, stream ? stream : cudaStreamPerThread));
}

// cudaEventRecordExternal only matters inside a graph capture, which records every event anyway.
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010, [&]() -> cudaError_t {
    if (flags & ~static_cast<unsigned>(cudaEventRecordExternal)) return ret(cudaErrorInvalidValue);
    return cudaEventRecord(event, stream);
  });
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaEventQuery_v3020, [&]() -> cudaError_t {
    auto e = resolve_event(event);
    if (!e) return ret(cudaErrorInvalidResourceHandle);
    if (const cudaError_t status = check_event_wait(*e); status != cudaSuccess) return status;
    std::lock_guard lock(e->mu);
    return e->done >= e->recorded ? cudaSuccess : cudaErrorNotReady;
  });
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return api_call(
      CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
      [&]() -> cudaError_t {
        auto e = resolve_event(event);
        if (!e) return ret(cudaErrorInvalidResourceHandle);
        if (const cudaError_t status = check_event_wait(*e); status != cudaSuccess) return status;
        std::unique_lock lock(e->mu);
        std::uint64_t target = e->recorded;
        e->cv.wait(lock, [&] { return e->done >= target; });
        return cudaSuccess;
      },
      event_sync(event));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return ret(cudaErrorInvalidValue);
  auto a = resolve_event(start);
  auto b = resolve_event(end);
  if (!a || !b || a->device != b->device) return ret(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return ret(cudaErrorInvalidResourceHandle);
  Clock::time_point ta, tb;
  {
    std::lock_guard lock(a->mu);
    if (a->recorded == 0) return ret(cudaErrorInvalidResourceHandle);
    if (a->done < a->recorded) return cudaErrorNotReady;
    ta = a->stamp;
  }
  {
    std::lock_guard lock(b->mu);
    if (b->recorded == 0) return ret(cudaErrorInvalidResourceHandle);
    if (b->done < b->recorded) return cudaErrorNotReady;
    tb = b->stamp;
  }
  *ms = std::chrono::duration<float, std::milli>(tb - ta).count();
  return cudaSuccess;
}

// ---------------- host functions ----------------

// cudaLaunchHostFunc: fn(userData) runs on the stream's worker in stream order, like the host
// node the real runtime inserts; the simulated framework's kernels are launched this way. The GPU
// waits for it on the wall clock.
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000, [&]() -> cudaError_t {
    if (!fn) return ret(cudaErrorInvalidValue);
    return submit(
        stream,
        [fn, userData] {
          fn(userData);
          gpu_caught_up();
        },
        false);
  });
}
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  ApiCall call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_ptsz_v10000);
  return call.returned(cudaLaunchHostFunc(stream ? stream : cudaStreamPerThread, fn, userData));
}

// The older form of a host function: the callback also gets the stream and a status.
cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void* userData,
                                  unsigned int flags) {
  return api_call(CUPTI_RUNTIME_TRACE_CBID_cudaStreamAddCallback_v5000, [&]() -> cudaError_t {
    if (!callback || flags != 0) return ret(cudaErrorInvalidValue);
    return submit(
        stream,
        [stream, callback, userData] {
          callback(stream, cudaSuccess, userData);
          gpu_caught_up();
        },
        false);
  });
}

// ---------------- simulation extensions ----------------

// A kernel named simcudaBusyKernel that runs for the given time.
cudaError_t simcudaBusy(cudaStream_t stream, unsigned microseconds) {
  return submit(
      stream, [microseconds] { gpu_run_for(std::chrono::microseconds(microseconds)); }, false,
      kernel_activity("simcudaBusyKernel"));
}

cudaError_t simcudaEnqueue(cudaStream_t stream, void (*fn)(void* arg), void* arg) {
  if (!fn) return ret(cudaErrorInvalidValue);
  return submit(
      stream,
      [fn, arg] {
        fn(arg);
        simcuda::gpu_caught_up();
      },
      false);
}

cudaError_t simcudaEnqueueKernel(cudaStream_t stream, const char* deviceName, void (*fn)(void* arg), void* arg) {
  if (!fn || !deviceName) return ret(cudaErrorInvalidValue);
  return submit(
      stream, [fn, arg] { fn(arg); }, false, kernel_activity(deviceName));
}

void simcudaRunFor(unsigned long long ns) { simcuda::gpu_run_for(std::chrono::nanoseconds(ns)); }

void simcudaCaughtUp() { simcuda::gpu_caught_up(); }

}  // extern "C"
