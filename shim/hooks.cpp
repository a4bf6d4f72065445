// The interposed functions, generated from common/trainshim/api.def.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <nccl.h>

#include <new>

#include "call.hpp"
#include "core/gpu_activity.hpp"
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

// The recorded call: the hook's body, or for a launch the path taken only after a host sync.
#define TS_RECORDED_CALL(name, return_type, parameters, arguments, describe_expression)       \
  trainshim::shim::Call<trainshim::Api::name> call;                                           \
  if (!call.active()) return real arguments;                                                  \
  {                                                                                           \
    /* Built in place (the prvalue is not copied): a copy of its byte fields stalls the store \
       forwarding of the hot path. */                                                         \
    using namespace trainshim::shim::describe;                                                \
    new (&call.draft) Draft(describe_expression);                                             \
  }                                                                                           \
  call.begin();                                                                               \
  const return_type result = real arguments;                                                  \
  call.end(static_cast<int>(result));                                                         \
  return result;

// A launch after no sync is forwarded at once: a load of the cached real function, the thread's flag
// and a jump. Everything else (resolving it the first time, recording) is a function of its own, so
// that the hook needs no frame.
#define TS_API(name, api_class, library, return_type, parameters, arguments, describe_expression)                    \
  [[maybe_unused]] __attribute__((noinline, cold)) static return_type recorded_##name parameters {                   \
    const auto real =                                                                                                \
        reinterpret_cast<return_type(*) parameters>(trainshim::shim::real_function(trainshim::Api::name));           \
    if (!real) return not_loaded<return_type>();                                                                     \
    if (!trainshim::shim::launch_after_sync()) return real arguments;                                                \
    TS_RECORDED_CALL(name, return_type, parameters, arguments, describe_expression)                                  \
  }                                                                                                                  \
  extern "C" __attribute__((visibility("default"))) return_type name parameters {                                    \
    using Real = return_type(*) parameters;                                                                          \
    constexpr auto api = trainshim::Api::name;                                                                       \
    if constexpr (trainshim::ApiClass::api_class == trainshim::ApiClass::Launch) {                                   \
      const auto resolved =                                                                                          \
          reinterpret_cast<Real>(trainshim::shim::detail::g_real[std::size_t(api)].load(std::memory_order_acquire)); \
      if (resolved && !trainshim::shim::thread_state().synced) [[likely]]                                            \
        return resolved arguments;                                                                                   \
      return recorded_##name arguments;                                                                              \
    } else {                                                                                                         \
      const auto real = reinterpret_cast<Real>(trainshim::shim::real_function(api));                                 \
      if (!real) return not_loaded<return_type>();                                                                   \
      TS_RECORDED_CALL(name, return_type, parameters, arguments, describe_expression)                                \
    }                                                                                                                \
  }
#define TS_RECORD(...)
#include "trainshim/api.def"
#undef TS_RECORD
#undef TS_API
#undef TS_RECORDED_CALL

// A program's own CUPTI client (torch.profiler through Kineto, a tool of its own) reaches these: the
// shim steps aside (core/gpu_activity.hpp), then forwards. trainshim's own calls go to libcupti by
// handle. Each of the first four starts a client: Kineto registers its clock and its buffers
// without subscribing.
#define TS_CUPTI_ENTRY(name, parameters, arguments)                                                                 \
  extern "C" __attribute__((visibility("default"))) CUptiResult name parameters {                                   \
    using Real = CUptiResult(*) parameters;                                                                         \
    const auto real = reinterpret_cast<Real>(trainshim::shim::runtime_function(trainshim::Library::Cudart, #name)); \
    if (!real) return CUPTI_ERROR_NOT_INITIALIZED;                                                                  \
    trainshim::shim::yield_gpu_timeline();                                                                          \
    return real arguments;                                                                                          \
  }
TS_CUPTI_ENTRY(cuptiSubscribe, (CUpti_SubscriberHandle * subscriber, CUpti_CallbackFunc callback, void* userdata),
               (subscriber, callback, userdata))
TS_CUPTI_ENTRY(cuptiSubscribe_v2,
               (CUpti_SubscriberHandle * subscriber, CUpti_CallbackFunc callback, void* userdata,
                CUpti_SubscriberParams* params),
               (subscriber, callback, userdata, params))
TS_CUPTI_ENTRY(cuptiActivityRegisterCallbacks,
               (CUpti_BuffersCallbackRequestFunc requested, CUpti_BuffersCallbackCompleteFunc completed),
               (requested, completed))
TS_CUPTI_ENTRY(cuptiActivityRegisterTimestampCallback, (CUpti_TimestampCallbackFunc clock), (clock))
// A library tearing CUPTI down (between profiling sessions, or a probe) takes trainshim's buffers
// and callbacks with it: trainshim steps aside first, and the report says the timeline was yielded.
TS_CUPTI_ENTRY(cuptiFinalize, (void), ())
#undef TS_CUPTI_ENTRY
