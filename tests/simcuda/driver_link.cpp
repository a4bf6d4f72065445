// The runtime's way to the driver, as libcudart.so.13 takes it: dlopen("libcuda.so.1"), then dlsym
// by that handle for cuGetProcAddress_v2 and cuInit, and every other entry point through
// cuGetProcAddress_v2 for the runtime's CUDA version (under LD_DEBUG=symbols every cu* lookup the
// real libcudart makes reads "lookup in file=.../libcuda.so.1"; it imports dlopen and dlsym and
// has no DT_NEEDED on libcuda). A lookup by handle searches that library alone, so a preloaded
// library's cu* definitions never see the runtime's own driver calls.
//
// SIMCUDA_DRIVER_LOOKUP=global takes the other path, that of code linked against libcuda: the
// entry points are looked up in the global scope, where a preloaded library's definitions come
// first. The real runtime never does this; it lets tests call the preloaded hooks from inside a
// runtime call.
#include "driver_link.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "internal.h"

namespace simcuda {
namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

template <class F>
void take(const Driver& d, F& slot, const char* name, cuuint64_t flags) {
  void* p = nullptr;
  if (d.get_proc_address(name, &p, CUDART_VERSION, flags, nullptr) == CUDA_SUCCESS) slot = reinterpret_cast<F>(p);
}

Driver* load() {
  const char* lookup = std::getenv("SIMCUDA_DRIVER_LOOKUP");
  const bool global = lookup && std::strcmp(lookup, "global") == 0;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
  if (!handle) return nullptr;
  // The driver works on the device of the libcudart.so.13 it links. A runtime loaded under another
  // name (a wheel's libcudart-<sha8>.so.13) has a device of its own and keeps doing its work itself.
  Dl_info mine{}, linked{};
  void* linked_runtime = dlsym(handle, "simcudaBusy");
  if (!dladdr(reinterpret_cast<void*>(&load), &mine) || !linked_runtime || !dladdr(linked_runtime, &linked) ||
      mine.dli_fbase != linked.dli_fbase) {
    dlclose(handle);
    return nullptr;
  }
  void* scope = global ? RTLD_DEFAULT : handle;
  auto get_proc_address = reinterpret_cast<GetProcAddress>(dlsym(scope, "cuGetProcAddress_v2"));
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(scope, "cuInit"));
  if (!get_proc_address || !init || init(0) != CUDA_SUCCESS) return nullptr;
  auto* d = new Driver{};
  d->get_proc_address = get_proc_address;
  take(*d, d->driver_get_version, "cuDriverGetVersion", CU_GET_PROC_ADDRESS_DEFAULT);
  take(*d, d->memcpy, "cuMemcpy", CU_GET_PROC_ADDRESS_LEGACY_STREAM);
  take(*d, d->memcpy_ptds, "cuMemcpy", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  take(*d, d->stream_synchronize, "cuStreamSynchronize", CU_GET_PROC_ADDRESS_LEGACY_STREAM);
  take(*d, d->stream_synchronize_ptsz, "cuStreamSynchronize", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  const bool complete =
      d->driver_get_version && d->memcpy && d->memcpy_ptds && d->stream_synchronize && d->stream_synchronize_ptsz;
  return complete ? d : nullptr;
}

// cudaGetDriverEntryPointByVersion asks the driver's cuGetProcAddress_v2; the statuses and flags
// of the two APIs have the same values. cudaEnableDefault is the legacy stream for the plain
// entry point, per-thread for its _ptsz twin (what code built for per-thread streams calls).
cudaError_t entry_point(const char* symbol, void** function, unsigned version, unsigned long long flags,
                        cudaDriverEntryPointQueryResult* status, bool per_thread_build) {
  if (!symbol || !function) return record_error(cudaErrorInvalidValue);
  const Driver* d = driver();
  if (!d) return record_error(cudaErrorInsufficientDriver);
  if (flags == cudaEnableDefault)
    flags = per_thread_build ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult r = d->get_proc_address(symbol, function, int(version), flags, &found);
  if (status) *status = static_cast<cudaDriverEntryPointQueryResult>(found);
  if (r == CUDA_ERROR_NOT_FOUND) {
    *function = nullptr;
    return cudaSuccess;
  }
  return record_error(static_cast<cudaError_t>(r));
}

}  // namespace

const Driver* driver() {
  static const Driver* const loaded = load();
  return loaded;
}

}  // namespace simcuda

using simcuda::entry_point;

extern "C" {
cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                         cudaDriverEntryPointQueryResult* driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* driverStatus);

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, false);
}
cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                         cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus, true);
}
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, false);
}
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* driverStatus) {
  return entry_point(symbol, funcPtr, cudaVersion, flags, driverStatus, true);
}
}
