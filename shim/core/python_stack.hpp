#pragma once
// Python stacks read straight from CPython's memory (3.10 to 3.13, LP64) without the GIL and
// without linking libpython: hooked calls usually run with the GIL released, and taking it there
// could deadlock or reorder the job's own threads.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "trainshim/protocol.hpp"

namespace trainshim::shim::python {

struct RawFrame {
  const void* code;  // the code object (identity for caching)
  int32_t offset;    // byte offset of the executing instruction in the code, -1 if unknown
};

// Frames kept from the outermost end of a chain deeper than a capture's `max`: the user's script
// (its main loop, the call into a framework) stays on the stack however deep the framework is.
inline constexpr int kOuterFrames = 20;

struct Capture {
  int count = 0;          // frames written
  int omitted = 0;        // frames left out between the innermost and the outermost kept
  bool borrowed = false;  // the frames of the thread blocked in backward, not the caller's
};

// The calling thread's Python frames, innermost first; at most `max`: the chain is walked to its
// end, and when it is deeper than `max`, the innermost (max - kOuterFrames) and the outermost
// kOuterFrames are kept (max / 3 outermost for a small max). Empty in a process without Python,
// on a thread without a Python thread state, or on an unsupported build. Reads only: no GIL, no
// references, no allocation, no locks (safe inside any hook).
//
// A thread that has a Python thread state but no frames (the autograd engine's device threads:
// PythonEngine::thread_init creates one, then releases the GIL) gets the frames of the one other
// Python thread blocked in backward, marked borrowed: that thread called loss.backward() and waits
// for this one's work. They are read with reads that fail softly on a bad address, since that
// thread's frames are not ours to trust.
Capture capture(RawFrame* out, int max);

// Another thread's Python frames, read from this one (the shim's sampler) with reads that fail
// softly: the thread whose PyThreadState.thread_id is `thread_id` (its pthread_t; 0 when not known),
// or with `main_thread`, the process's main thread. Kept as capture() keeps them. Empty when the
// thread has no Python thread state. `torn`: the frames changed or vanished while read (a read
// failed, or the chain's head was not the same after the walk): nothing is returned. Never takes
// the GIL, never calls into CPython but PyInterpreterState_Main. The code objects are not kept
// alive: describe_code and line_of must read them softly (borrowed = true).
// `hint`: where the thread's state was found last time (kept by the caller per thread, empty at
// first): checked, then used, sparing the walk of the list of thread states.
struct ThreadHint {
  const void* tstate = nullptr;
  uint64_t thread_id = 0;
};
// `stayed_asleep(context)`, when given, is asked after the first walk whether the thread stayed
// off the processor since before it began (the kernel's count of the thread's runs unchanged): then
// the second walk is spared.
// `process`: a forked child of this process, still running this process's image (0: this
// process): the frames of its thread are read from its memory, at the addresses it inherited.
Capture capture_thread(uint64_t thread_id, bool main_thread, ThreadHint& hint, RawFrame* out, int max, bool& torn,
                       bool (*stayed_asleep)(void*) = nullptr, void* context = nullptr, pid_t process = 0);

struct CodeInfo {
  std::string file;      // co_filename
  std::string function;  // co_name (as traceback.extract_stack() reports it)
};
// Reads a code object's names (allocates: call only on the slow path, when a stack is new).
// `code` must come from capture() while those frames are still live (within the same hooked
// call): nothing keeps a code object alive once its frame returns. Borrowed frames are read with
// reads that fail softly.
bool describe_code(const void* code, bool borrowed, CodeInfo& out);
// The source line of `offset` in `code` (what PyCode_Addr2Line answers), or the first line if
// unknown. Same lifetime rule as describe_code. May be -1 where CPython itself has no line
// (f_lineno None).
int line_of(const void* code, int32_t offset, bool borrowed);
// "3.11" etc., or empty when no supported interpreter is in the process.
std::string_view interpreter_version();
// What this process's interpreter allows (resolves it on first use); the value of
// SegmentHeader::python_stacks.
uint32_t stacks_status();

namespace detail {
// The resolved layout as "key=value" lines (the keys of tests/python_stack/layout.c), empty when
// disabled: lets the tests compare what capture() uses with each version's real headers.
std::string layout_report();
}  // namespace detail

}  // namespace trainshim::shim::python
