// The interposed functions, generated from common/trainshim/api.def.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <new>

#include "call.hpp"
#include "core/resolve.hpp"
#include "cudart_per_thread.h"
#include "driver_per_thread.h"

namespace {

// What a hook returns when no loaded object exports the real function. The hook's symbol is seen
// by every lookup in the process, so a program that calls CUDA only when a runtime is linked (a weak
// reference, or a dlsym probe) takes its CUDA path and ends here. With no runtime loaded the hook
// answers as a runtime does on a machine without a driver, the answer CPU-only code expects
// (PyTorch's device_count_impl counts no device on cudaErrorInsufficientDriver); a runtime that
// lacks this one function answers with its own "symbol not found". NCCL likewise: no usable CUDA
// when no NCCL is loaded, a system error when the loaded one lacks the function. Hiding the hooks
// until a runtime is loaded (an IFUNC resolving to null) is not safe: glibc runs the resolver of
// the preloaded library before relocating it whenever an object relocated earlier binds a hook
// at once (BIND_NOW, a function pointer), and prints "Relink ..." for each such reference.
template <class Result>
Result not_loaded();
template <>
cudaError_t not_loaded<cudaError_t>() {
  const bool runtime_loaded = trainshim::shim::runtime_function(trainshim::Library::Cudart, "cudaRuntimeGetVersion");
  return runtime_loaded ? cudaErrorSharedObjectSymbolNotFound : cudaErrorInsufficientDriver;
}
template <>
ncclResult_t not_loaded<ncclResult_t>() {
  const bool nccl_loaded = trainshim::shim::runtime_function(trainshim::Library::Nccl, "pncclGetVersion");
  return nccl_loaded ? ncclSystemError : ncclUnhandledCudaError;
}
// The driver likewise: no device when no libcuda is loaded.
template <>
CUresult not_loaded<CUresult>() {
  const bool driver_loaded = trainshim::shim::runtime_function(trainshim::Library::Driver, "cuDriverGetVersion");
  return driver_loaded ? CUDA_ERROR_NOT_FOUND : CUDA_ERROR_NO_DEVICE;
}

}  // namespace

#define TS_API(name, api_class, library, return_type, parameters, arguments, describe_expression) \
  extern "C" __attribute__((visibility("default"))) return_type name parameters {                 \
    using Real = return_type(*) parameters;                                                       \
    constexpr auto api = trainshim::Api::name;                                                    \
    const auto real = reinterpret_cast<Real>(trainshim::shim::real_function(api));                \
    if (!real) return not_loaded<return_type>();                                                  \
    trainshim::shim::Call<api> call;                                                              \
    if (!call.active()) return real arguments;                                                    \
    {                                                                                             \
      /* Built in place (the prvalue is not copied): a copy of its byte fields stalls the store   \
         forwarding of the hot path. */                                                           \
      using namespace trainshim::shim::describe;                                                  \
      new (&call.draft) Draft(describe_expression);                                               \
    }                                                                                             \
    call.begin();                                                                                 \
    const return_type result = real arguments;                                                    \
    call.end(static_cast<int>(result));                                                           \
    return result;                                                                                \
  }
#define TS_RECORD(...)
#include "trainshim/api.def"
#undef TS_RECORD
#undef TS_API
