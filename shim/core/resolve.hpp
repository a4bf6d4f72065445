#pragma once
// Finds the real function behind each interposed symbol.
#include <atomic>

#include "trainshim/api.hpp"

namespace trainshim::shim {

namespace detail {
extern std::atomic<void*> g_real[kApiCount];
void* resolve(Api api);
}  // namespace detail

// dlsym(RTLD_NEXT) first; where that finds nothing (a library in a local scope, as Python loads
// extensions and libcudart loads libcuda.so.1, or under another name), whichever loaded object
// exports it. For NCCL, pncclX first,
// then ncclX defined by another object than the shim. nullptr when no loaded object exports it.
// The answer is cached once found.
inline void* real_function(Api api) {
  if (void* cached = detail::g_real[static_cast<std::size_t>(api)].load(std::memory_order_acquire)) return cached;
  return detail::resolve(api);
}

// A function of the runtime that trainshim calls but does not interpose, by name (for NCCL, the
// pncclX name), found as real_function finds them.
void* runtime_function(Library library, const char* name);

}  // namespace trainshim::shim
