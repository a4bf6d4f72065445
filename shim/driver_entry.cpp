// Driver functions reached through a pointer: cuGetProcAddress (both versions) and the runtime's
// cudaGetDriverEntryPoint family ask the driver for a function by its base name and hand back its
// address, which a program then calls without any symbol lookup. Each interposer calls the real one
// and, when the address it answers is the real function of a hooked driver API, hands back the hook
// instead, so that the calls made through it are recorded like calls by name. A loader that takes
// cuGetProcAddress itself from its own handle of libcuda (dlsym: cuda-python, Numba's ctypes binding,
// Triton, XLA) never reaches these: its calls are not recorded (docs/recording.md). One that asks
// for cuGetProcAddress itself through these gets the interposer back.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <array>
#include <cstring>
#include <utility>

#include "core/resolve.hpp"
#include "driver_per_thread.h"

#undef cuGetProcAddress

extern "C" {
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
}

namespace {

using trainshim::Api;
using trainshim::Library;
using trainshim::shim::real_function;
using trainshim::shim::runtime_function;

struct Hook {
  Api api;
  void* hook;
};

#define TS_API(name, api_class, library, ...) TS_HOOK_##library(name)
#define TS_HOOK_Cudart(name)
#define TS_HOOK_Nccl(name)
#define TS_HOOK_Driver(name) Hook{Api::name, reinterpret_cast<void*>(&name)},
#define TS_RECORD(...)
const Hook kDriverHooks[] = {
#include "trainshim/api.def"
};
#undef TS_RECORD
#undef TS_HOOK_Driver
#undef TS_HOOK_Nccl
#undef TS_HOOK_Cudart
#undef TS_API

// cuGetProcAddress itself, which a loader may ask for by name and then resolve everything with:
// its interposer stands for it, so that what is looked up through it is hooked as well.
struct ProcAddressHook {
  const char* name;
  void* hook;
};
const ProcAddressHook kProcAddressHooks[] = {
    {"cuGetProcAddress_v2", reinterpret_cast<void*>(&cuGetProcAddress_v2)},
    {"cuGetProcAddress", reinterpret_cast<void*>(&cuGetProcAddress)},
};

// The hook standing for `function`, or `function` itself when it is no hooked API's. The driver
// hands out the address of its exported function; one it hands out from elsewhere is still
// recognised by the exported name dladdr finds for it.
void* hooked(void* function) {
  if (!function) return function;
  for (const Hook& h : kDriverHooks)
    if (real_function(h.api) == function) return h.hook;
  for (const ProcAddressHook& h : kProcAddressHooks)
    if (runtime_function(Library::Driver, h.name) == function) return h.hook;
  Dl_info info{};
  if (!dladdr(function, &info) || !info.dli_sname || info.dli_saddr != function) return function;
  for (const Hook& h : kDriverHooks)
    if (trainshim::api_info(h.api).name == info.dli_sname) return h.hook;
  for (const ProcAddressHook& h : kProcAddressHooks)
    if (std::strcmp(h.name, info.dli_sname) == 0) return h.hook;
  return function;
}

template <class Function>
Function real(Library library, const char* name) {
  return reinterpret_cast<Function>(runtime_function(library, name));
}

}  // namespace

extern "C" {

#define TS_EXPORT __attribute__((visibility("default")))

TS_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult* symbolStatus) {
  using Real = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  const auto get = real<Real>(Library::Driver, "cuGetProcAddress_v2");
  if (!get) return CUDA_ERROR_NO_DEVICE;
  const CUresult result = get(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (result == CUDA_SUCCESS && pfn) *pfn = hooked(*pfn);
  return result;
}

// CUDA 11.3's version: no status.
TS_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  using Real = CUresult (*)(const char*, void**, int, cuuint64_t);
  const auto get = real<Real>(Library::Driver, "cuGetProcAddress");
  if (!get) return CUDA_ERROR_NO_DEVICE;
  const CUresult result = get(symbol, pfn, cudaVersion, flags);
  if (result == CUDA_SUCCESS && pfn) *pfn = hooked(*pfn);
  return result;
}

// The runtime's entry points, each with a _ptsz twin (what code built for per-thread default
// streams calls); the runtime asks the driver's cuGetProcAddress through its own pointer.
#define TS_ENTRY_POINT(name)                                                                                 \
  TS_EXPORT cudaError_t name(const char* symbol, void** funcPtr, unsigned long long flags,                   \
                             cudaDriverEntryPointQueryResult* driverStatus) {                                \
    using Real = cudaError_t (*)(const char*, void**, unsigned long long, cudaDriverEntryPointQueryResult*); \
    const auto get = real<Real>(Library::Cudart, #name);                                                     \
    if (!get) return cudaErrorInsufficientDriver;                                                            \
    const cudaError_t result = get(symbol, funcPtr, flags, driverStatus);                                    \
    if (result == cudaSuccess && funcPtr) *funcPtr = hooked(*funcPtr);                                       \
    return result;                                                                                           \
  }
#define TS_ENTRY_POINT_BY_VERSION(name)                                                                              \
  TS_EXPORT cudaError_t name(const char* symbol, void** funcPtr, unsigned int cudaVersion, unsigned long long flags, \
                             cudaDriverEntryPointQueryResult* driverStatus) {                                        \
    using Real =                                                                                                     \
        cudaError_t (*)(const char*, void**, unsigned int, unsigned long long, cudaDriverEntryPointQueryResult*);    \
    const auto get = real<Real>(Library::Cudart, #name);                                                             \
    if (!get) return cudaErrorInsufficientDriver;                                                                    \
    const cudaError_t result = get(symbol, funcPtr, cudaVersion, flags, driverStatus);                               \
    if (result == cudaSuccess && funcPtr) *funcPtr = hooked(*funcPtr);                                               \
    return result;                                                                                                   \
  }

TS_ENTRY_POINT(cudaGetDriverEntryPoint)
TS_ENTRY_POINT(cudaGetDriverEntryPoint_ptsz)
TS_ENTRY_POINT_BY_VERSION(cudaGetDriverEntryPointByVersion)
TS_ENTRY_POINT_BY_VERSION(cudaGetDriverEntryPointByVersion_ptsz)

}  // extern "C"
