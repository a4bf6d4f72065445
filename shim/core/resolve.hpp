#pragma once
// Finds the real function behind each interposed symbol.
#include "trainshim/api.hpp"

namespace trainshim::shim {

// dlsym(RTLD_NEXT) first; where that finds nothing because the library was loaded into a local
// scope (RTLD_LOCAL, as Python loads extensions), the loaded library's own handle. nullptr when
// the library is not loaded. The answer is cached once found.
void* real_function(Api api);

// A function of the runtime that trainshim calls but does not interpose, by name.
void* runtime_function(Library library, const char* name);

}  // namespace trainshim::shim
