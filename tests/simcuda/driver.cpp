// The simulated CUDA driver, libcuda.so.1: the driver API's syncs, copies, allocations and entry
// point lookup, on the simulated device of libcudart.so.13 (its registry and streams, internal.h).
// The real driver holds the device and the runtime reaches it; here the device lives in the
// runtime library and the driver links it, the one way two libraries share it without a third.
//
// Semantics follow cuda.h and the CUDA "API synchronization behavior" notes: a synchronous copy
// returns once the copy is done, except device to device; an asynchronous copy waits only for
// pageable host memory; cuMemFree waits for the device, cuMemFreeAsync for nothing. There are no
// contexts: every call acts on the runtime's current device, as if on its primary context.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string_view>

#include "driver_api.h"
#include "internal.h"

namespace simcuda {
namespace {

std::atomic<bool> initialized{false};

// The runtime's codes for the failures both report are the driver's (CUDA 10 aligned them:
// cudaErrorInvalidResourceHandle 400 == CUDA_ERROR_INVALID_HANDLE, capture errors 900-907).
CUresult as_driver(cudaError_t e) { return static_cast<CUresult>(e); }

void* address(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }

bool is_device(const void* p) {
  const auto r = find_range(p);
  return r && r->kind == MemKind::Device;
}

// simcuda's own submission: a captured operation never runs at the call, so the call never waits
// for it. A copy is reported to the simulated CUPTI as the runtime's are (the real CUPTI traces the
// driver's work, whoever called it).
CUresult submit_on(CUstream stream, std::function<void()> op, bool wait, std::optional<Traced> as = {}) {
  return as_driver(simcuda::submit(reinterpret_cast<cudaStream_t>(stream), std::move(op), wait, std::move(as)));
}

// cuMemcpy's family: `synchronous` for the calls without Async; device-to-device copies never
// make the host wait, asynchronous ones wait only to take or fill pageable host memory.
CUresult copy(void* dst, const void* src, size_t bytes, CUstream stream, bool synchronous) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (bytes == 0) return CUDA_SUCCESS;
  if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
  const bool device_to_device = is_device(dst) && is_device(src);
  const bool pageable = is_pageable(dst) || is_pageable(src);
  const bool wait = synchronous ? !device_to_device : pageable;
  if (synchronous)
    if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return as_driver(e);
  return submit_on(
      stream, [dst, src, bytes] { std::memmove(dst, src, bytes); }, wait,
      memcpy_activity(dst, src, bytes, !synchronous));
}

CUresult to_device(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream, bool synchronous) {
  if (dst && !is_device(address(dst))) return CUDA_ERROR_INVALID_VALUE;
  return copy(address(dst), src, bytes, stream, synchronous);
}

CUresult to_host(void* dst, CUdeviceptr src, size_t bytes, CUstream stream, bool synchronous) {
  if (src && !is_device(address(src))) return CUDA_ERROR_INVALID_VALUE;
  return copy(dst, address(src), bytes, stream, synchronous);
}

CUresult stream_synchronize(CUstream stream) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  const auto s = resolve_stream(reinterpret_cast<cudaStream_t>(stream));
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return as_driver(e);
  if (const cudaError_t e = check_wait_on(s); e != cudaSuccess) return as_driver(e);
  s->wait_ticket(s->last_ticket());
  return CUDA_SUCCESS;
}

CUresult stream_query(CUstream stream) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  const auto s = resolve_stream(reinterpret_cast<cudaStream_t>(stream));
  if (!s) return CUDA_ERROR_INVALID_HANDLE;
  if (const cudaError_t e = check_wait_on(s); e != cudaSuccess) return as_driver(e);
  return s->idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult context_synchronize() {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return as_driver(e);
  if (const cudaError_t e = check_device_wait(currentDevice()); e != cudaSuccess) return as_driver(e);
  synchronize_device(currentDevice());
  return CUDA_SUCCESS;
}

CUresult host_alloc(void** p, size_t bytes) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  void* memory = nullptr;
  if (posix_memalign(&memory, static_cast<size_t>(sysconf(_SC_PAGESIZE)), bytes ? bytes : 1) != 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  register_range({reinterpret_cast<std::uintptr_t>(memory), bytes, MemKind::PinnedAlloc, currentDevice()});
  *p = memory;
  return CUDA_SUCCESS;
}

CUresult free_async(CUdeviceptr ptr, CUstream stream) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  const auto r = find_range(address(ptr));
  if (!r || r->kind != MemKind::Device || r->base != ptr) return CUDA_ERROR_INVALID_VALUE;
  unregister_range(r->base);
  return submit_on(
      stream, [ptr] { std::free(address(ptr)); }, false);
}

}  // namespace
}  // namespace simcuda

using namespace simcuda;

extern "C" {

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  initialized = true;
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) { return context_synchronize(); }
CUresult cuCtxSynchronize_v2(CUcontext) { return context_synchronize(); }

CUresult cuStreamSynchronize(CUstream stream) { return stream_synchronize(stream); }
CUresult cuStreamSynchronize_ptsz(CUstream stream) {
  return stream_synchronize(stream ? stream : CU_STREAM_PER_THREAD);
}
CUresult cuStreamQuery(CUstream stream) { return stream_query(stream); }
CUresult cuStreamQuery_ptsz(CUstream stream) { return stream_query(stream ? stream : CU_STREAM_PER_THREAD); }

// cudaEventSynchronize's wait (runtime.cpp): until the stream reached the event's last record.
CUresult cuEventSynchronize(CUevent event) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  const auto e = resolve_event(reinterpret_cast<cudaEvent_t>(event));
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  std::unique_lock lock(e->mu);
  const std::uint64_t target = e->recorded;
  e->cv.wait(lock, [&] { return e->done >= target; });
  return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!stream) return CUDA_ERROR_INVALID_VALUE;
  *stream = reinterpret_cast<CUstream>(create_stream(currentDevice(), flags, 0));
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream stream) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return destroy_stream(reinterpret_cast<cudaStream_t>(stream)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  return to_device(dst, src, bytes, CU_STREAM_LEGACY, true);
}
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t bytes) {
  return to_device(dst, src, bytes, CU_STREAM_PER_THREAD, true);
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  return to_host(dst, src, bytes, CU_STREAM_LEGACY, true);
}
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t bytes) {
  return to_host(dst, src, bytes, CU_STREAM_PER_THREAD, true);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  return to_device(dst, src, bytes, stream, false);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  return to_device(dst, src, bytes, stream ? stream : CU_STREAM_PER_THREAD, false);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return to_host(dst, src, bytes, stream, false);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return to_host(dst, src, bytes, stream ? stream : CU_STREAM_PER_THREAD, false);
}
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(address(dst), address(src), bytes, CU_STREAM_LEGACY, true);
}
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(address(dst), address(src), bytes, CU_STREAM_PER_THREAD, true);
}
// Unified addressing: the pointers say the direction.
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(address(dst), address(src), bytes, CU_STREAM_LEGACY, true);
}
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  return copy(address(dst), address(src), bytes, CU_STREAM_PER_THREAD, true);
}
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy(address(dst), address(src), bytes, stream, false);
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  return copy(address(dst), address(src), bytes, stream ? stream : CU_STREAM_PER_THREAD, false);
}

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  void* memory = nullptr;
  if (posix_memalign(&memory, 256, bytes) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  register_range({reinterpret_cast<std::uintptr_t>(memory), bytes, MemKind::Device, currentDevice()});
  *ptr = reinterpret_cast<std::uintptr_t>(memory);
  return CUDA_SUCCESS;
}

// Like cudaFree, waits for the device before the memory is released.
CUresult cuMemFree_v2(CUdeviceptr ptr) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (const cudaError_t e = check_potentially_unsafe(); e != cudaSuccess) return as_driver(e);
  const auto r = find_range(address(ptr));
  if (!r || r->kind != MemKind::Device || r->base != ptr) return CUDA_ERROR_INVALID_VALUE;
  if (const cudaError_t e = check_device_wait(r->device); e != cudaSuccess) return as_driver(e);
  synchronize_device(r->device);
  unregister_range(r->base);
  std::free(address(ptr));
  return CUDA_SUCCESS;
}
CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) { return free_async(ptr, stream); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream) {
  return free_async(ptr, stream ? stream : CU_STREAM_PER_THREAD);
}

CUresult cuMemAllocHost_v2(void** p, size_t bytes) { return host_alloc(p, bytes); }
CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned int) { return host_alloc(p, bytes); }

CUresult cuMemFreeHost(void* p) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  const auto r = find_range(p);
  if (!r || r->kind != MemKind::PinnedAlloc || r->base != reinterpret_cast<std::uintptr_t>(p))
    return CUDA_ERROR_INVALID_VALUE;
  synchronize_device(r->device);
  unregister_range(r->base);
  std::free(p);
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!p || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  if (overlaps_any(base, bytes)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  register_range({base, bytes, MemKind::PinnedRegistered, currentDevice()});
  return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void* p) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  const auto r = find_range(p);
  if (!r || r->kind != MemKind::PinnedRegistered || r->base != reinterpret_cast<std::uintptr_t>(p))
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  unregister_range(r->base);
  return CUDA_SUCCESS;
}

// ---- devices and contexts: the runtime's device, its primary context active once the runtime
// used it (c10::cuda::hasPrimaryContext asks this before it sets a device) ----

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = device_count();
  return CUDA_SUCCESS;
}

// CUdevice_attribute and cudaDeviceAttr number the attributes alike.
CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return as_driver(cudaDeviceGetAttribute(value, static_cast<cudaDeviceAttr>(attribute), device));
}

CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned int* flags, int* active) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = device_used(device);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!context) return CUDA_ERROR_INVALID_VALUE;
  if (device < 0 || device >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  mark_device_used(device);
  *context = primary_context(device);
  return CUDA_SUCCESS;
}

// The current context is the runtime's current device's primary context, once it is active.
CUresult cuCtxGetCurrent(CUcontext* context) {
  if (!initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (!context) return CUDA_ERROR_INVALID_VALUE;
  *context = device_used(currentDevice()) ? primary_context(currentDevice()) : nullptr;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  *text = cudaGetErrorString(static_cast<cudaError_t>(error));
  return CUDA_SUCCESS;
}

}  // extern "C"

namespace {

// One versioned function behind a base name: `since` is the CUDA version that introduced it (the
// suffix of its PFN_ typedef in cudaTypedefs.h), `per_thread` marks a _ptds/_ptsz twin.
struct EntryPoint {
  std::string_view base;
  int since;
  bool per_thread;
  void* function;
};

template <class F>
void* fn(F* f) {
  return reinterpret_cast<void*>(f);
}

// Only the versions this driver implements: the 2000-era functions taking 32-bit device pointers
// are absent, so a version older than a _v2's answers "version not sufficient".
const EntryPoint kEntryPoints[] = {
    {"cuInit", 2000, false, fn(&cuInit)},
    {"cuDriverGetVersion", 2020, false, fn(&cuDriverGetVersion)},
    {"cuGetProcAddress", 11030, false, fn(&cuGetProcAddress)},
    {"cuGetProcAddress", 12000, false, fn(&cuGetProcAddress_v2)},
    {"cuCtxSynchronize", 2000, false, fn(&cuCtxSynchronize)},
    {"cuCtxSynchronize", 13000, false, fn(&cuCtxSynchronize_v2)},
    {"cuStreamSynchronize", 2000, false, fn(&cuStreamSynchronize)},
    {"cuStreamSynchronize", 7000, true, fn(&cuStreamSynchronize_ptsz)},
    {"cuStreamQuery", 2000, false, fn(&cuStreamQuery)},
    {"cuStreamQuery", 7000, true, fn(&cuStreamQuery_ptsz)},
    {"cuEventSynchronize", 2000, false, fn(&cuEventSynchronize)},
    {"cuStreamCreate", 2000, false, fn(&cuStreamCreate)},
    {"cuStreamDestroy", 4000, false, fn(&cuStreamDestroy_v2)},
    {"cuMemcpyHtoD", 3020, false, fn(&cuMemcpyHtoD_v2)},
    {"cuMemcpyHtoD", 7000, true, fn(&cuMemcpyHtoD_v2_ptds)},
    {"cuMemcpyDtoH", 3020, false, fn(&cuMemcpyDtoH_v2)},
    {"cuMemcpyDtoH", 7000, true, fn(&cuMemcpyDtoH_v2_ptds)},
    {"cuMemcpyDtoD", 3020, false, fn(&cuMemcpyDtoD_v2)},
    {"cuMemcpyDtoD", 7000, true, fn(&cuMemcpyDtoD_v2_ptds)},
    {"cuMemcpyHtoDAsync", 3020, false, fn(&cuMemcpyHtoDAsync_v2)},
    {"cuMemcpyHtoDAsync", 7000, true, fn(&cuMemcpyHtoDAsync_v2_ptsz)},
    {"cuMemcpyDtoHAsync", 3020, false, fn(&cuMemcpyDtoHAsync_v2)},
    {"cuMemcpyDtoHAsync", 7000, true, fn(&cuMemcpyDtoHAsync_v2_ptsz)},
    {"cuMemcpy", 4000, false, fn(&cuMemcpy)},
    {"cuMemcpy", 7000, true, fn(&cuMemcpy_ptds)},
    {"cuMemcpyAsync", 4000, false, fn(&cuMemcpyAsync)},
    {"cuMemcpyAsync", 7000, true, fn(&cuMemcpyAsync_ptsz)},
    {"cuMemAlloc", 3020, false, fn(&cuMemAlloc_v2)},
    {"cuMemFree", 3020, false, fn(&cuMemFree_v2)},
    {"cuMemFreeAsync", 11020, false, fn(&cuMemFreeAsync)},
    {"cuMemFreeAsync", 11020, true, fn(&cuMemFreeAsync_ptsz)},
    {"cuMemAllocHost", 3020, false, fn(&cuMemAllocHost_v2)},
    {"cuMemHostAlloc", 2020, false, fn(&cuMemHostAlloc)},
    {"cuMemFreeHost", 2000, false, fn(&cuMemFreeHost)},
    {"cuMemHostRegister", 6050, false, fn(&cuMemHostRegister_v2)},
    {"cuMemHostUnregister", 4000, false, fn(&cuMemHostUnregister)},
    {"cuDeviceGet", 2000, false, fn(&cuDeviceGet)},
    {"cuDeviceGetCount", 2000, false, fn(&cuDeviceGetCount)},
    {"cuDeviceGetAttribute", 2000, false, fn(&cuDeviceGetAttribute)},
    {"cuDevicePrimaryCtxGetState", 7000, false, fn(&cuDevicePrimaryCtxGetState)},
    {"cuDevicePrimaryCtxRetain", 7000, false, fn(&cuDevicePrimaryCtxRetain)},
    {"cuCtxGetCurrent", 4000, false, fn(&cuCtxGetCurrent)},
    {"cuGetErrorString", 6000, false, fn(&cuGetErrorString)},
};

// A name the table lacks but this library exports (a copy of it linked with generated stubs, as
// tests/realtorch builds for the real PyTorch, which asserts that each of its required driver
// functions resolves): that export, whatever the version asked.
void* exported_elsewhere(const char* symbol) {
  static void* const self = [] {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(&cuInit), &info) || !info.dli_fname) return static_cast<void*>(nullptr);
    return dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  }();
  return self ? dlsym(self, symbol) : nullptr;
}

// cuGetProcAddress: the newest function of that base name the caller's CUDA version knows; with
// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM its per-thread twin where there is one. The
// default is the legacy stream: a caller built for per-thread streams adds the flag itself
// (cuda.h's cuGetProcAddress_v2_ptsz). A name or version it lacks: CUDA_ERROR_NOT_FOUND with a
// null pointer and the reason in the status.
CUresult get_proc_address_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  if (cuda_version > CUDA_VERSION) return CUDA_ERROR_INVALID_VALUE;
  const bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  const EntryPoint* legacy = nullptr;
  const EntryPoint* twin = nullptr;
  bool named = false;
  for (const EntryPoint& e : kEntryPoints) {
    if (e.base != symbol) continue;
    named = true;
    if (e.since > cuda_version) continue;
    const EntryPoint*& best = e.per_thread ? twin : legacy;
    if (!best || e.since > best->since) best = &e;
  }
  const EntryPoint* chosen = per_thread && twin ? twin : legacy;
  *pfn = chosen ? chosen->function : nullptr;
  if (!named)
    if (void* stub = exported_elsewhere(symbol)) {
      *pfn = stub;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  if (status)
    *status = chosen  ? CU_GET_PROC_ADDRESS_SUCCESS
              : named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                      : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return chosen ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // namespace

extern "C" {
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  return get_proc_address_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
}
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return get_proc_address_v2(symbol, pfn, cudaVersion, flags, nullptr);
}
}
