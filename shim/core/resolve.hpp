#pragma once
// Finds the real function behind each interposed symbol.
#include <atomic>

#include "trainshim/api.hpp"

namespace trainshim::shim {

namespace detail {
extern std::atomic<void*> g_real[kApiCount];
void* resolve(Api api);
}  // namespace detail

// dlsym(RTLD_NEXT) first; where that finds nothing because the library was loaded into a local
// scope (RTLD_LOCAL, as Python loads extensions), the loaded library's own handle. nullptr when
// the library is not loaded. The answer is cached once found.
inline void* real_function(Api api) {
  if (void* cached = detail::g_real[static_cast<std::size_t>(api)].load(std::memory_order_acquire)) return cached;
  return detail::resolve(api);
}

// A function of the runtime that trainshim calls but does not interpose, by name.
void* runtime_function(Library library, const char* name);

}  // namespace trainshim::shim
