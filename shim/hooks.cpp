// The interposed functions, generated from common/trainshim/api.def.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <new>

#include "call.hpp"
#include "core/resolve.hpp"
#include "cudart_per_thread.h"

namespace {

// What a hook returns when no loaded object exports the real function. Without the shim the
// program could not have made this call at all: the dynamic linker would have found no definition
// (an undefined symbol), or a dlsym feature probe would have answered null. The closest answer is
// the runtime's own "symbol not found" and NCCL's system error.
template <class Result>
Result not_loaded();
template <>
cudaError_t not_loaded<cudaError_t>() { return cudaErrorSharedObjectSymbolNotFound; }
template <>
ncclResult_t not_loaded<ncclResult_t>() { return ncclSystemError; }

}  // namespace

#define TS_API(name, api_class, library, return_type, parameters, arguments, describe_expression) \
  extern "C" __attribute__((visibility("default"))) return_type name parameters {                 \
    using Real = return_type(*) parameters;                                                        \
    constexpr auto api = trainshim::Api::name;                                                     \
    const auto real = reinterpret_cast<Real>(trainshim::shim::real_function(api));                 \
    if (!real) return not_loaded<return_type>();                                                   \
    trainshim::shim::Call<api> call;                                                               \
    if (!call.active()) return real arguments;                                                     \
    {                                                                                              \
      /* Built in place (the prvalue is not copied): a copy of its byte fields stalls the store    \
         forwarding of the hot path. */                                                            \
      using namespace trainshim::shim::describe;                                                   \
      new (&call.draft) Draft(describe_expression);                                                \
    }                                                                                              \
    call.begin();                                                                                  \
    const return_type result = real arguments;                                                     \
    call.end(static_cast<int>(result));                                                            \
    return result;                                                                                 \
  }
#define TS_RECORD(...)
#include "trainshim/api.def"
#undef TS_RECORD
#undef TS_API
