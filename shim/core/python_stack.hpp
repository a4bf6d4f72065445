#pragma once
// The calling thread's Python stack, read straight from CPython's memory (3.10 to 3.13, LP64)
// without the GIL and without linking libpython: hooked calls usually run with the GIL released,
// and taking it there could deadlock or reorder the job's own threads.
#include <cstdint>
#include <string>
#include <string_view>

namespace trainshim::shim::python {

struct RawFrame {
  const void* code;  // the code object (identity for caching)
  int32_t offset;    // byte offset of the executing instruction in the code, -1 if unknown
};
// The calling thread's Python frames, innermost first; at most `max`. 0 in a process without
// Python, on a thread without a Python thread state, or on an unsupported version. Reads only:
// no GIL, no references, no allocation, no locks (safe inside any hook).
int capture(RawFrame* out, int max);

struct CodeInfo {
  std::string file;      // co_filename
  std::string function;  // co_name (as traceback.extract_stack() reports it)
};
// Reads a code object's names (allocates: call only on the slow path, when a stack is new).
// `code` must come from capture() on this thread while those frames are still live (within the
// same hooked call): nothing keeps a code object alive once its frame returns.
bool describe_code(const void* code, CodeInfo& out);
// The source line of `offset` in `code` (PyCode_Addr2Line), or the first line if unknown. Same
// lifetime rule as describe_code. May be -1 where CPython itself has no line (f_lineno None).
int line_of(const void* code, int32_t offset);
// "3.11" etc., or empty when no supported interpreter is in the process.
std::string_view interpreter_version();

namespace detail {
// The resolved layout as "key=value" lines (the keys of tests/python_stack/layout.c), empty when
// disabled: lets the tests compare what capture() uses with each version's real headers.
std::string layout_report();
}  // namespace detail

}  // namespace trainshim::shim::python
