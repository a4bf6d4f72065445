#include "symbolizer_testlib.hpp"

namespace trainshim_test_lib {
namespace {

TRAINSHIM_TEST_OPAQUE const void* capture_return_address() { return __builtin_return_address(0); }

}  // namespace

TRAINSHIM_TEST_OPAQUE const void* library_function(int* call_line) {
  const void* return_address = capture_return_address();
  *call_line = __LINE__ - 1;  // the line of the call above
  // Work after the call keeps it from becoming a tail jump, which would return past this function.
  asm volatile("" : : "r"(return_address) : "memory");
  return return_address;
}

}  // namespace trainshim_test_lib
