#pragma once
// A shared library with a known function, for resolving addresses outside the main program.

// Keeps a function a real call target with its own symbol: GCC's noipa also rules out the clones
// (".isra", ".constprop") that would change the symbol name; clang has no noipa and no such clones.
#if defined(__clang__)
#define TRAINSHIM_TEST_OPAQUE __attribute__((noinline))
#else
#define TRAINSHIM_TEST_OPAQUE __attribute__((noipa))
#endif

namespace trainshim_test_lib {

// Returns the return address of a call it makes (so an address inside itself) and sets
// *call_line to the source line of that call.
const void* library_function(int* call_line);

}  // namespace trainshim_test_lib
