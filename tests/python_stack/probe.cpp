// Loaded by probe.py and check_layout.py through ctypes, which releases the GIL around each call:
// the situation of a hooked CUDA call.
#include <chrono>
#include <string>
#include <string_view>
#include <thread>

#include "core/python_stack.hpp"

namespace py = trainshim::shim::python;

namespace {

int copy_out(std::string_view text, char* out, int capacity) {
  if (static_cast<int>(text.size()) >= capacity) return -1;
  text.copy(out, text.size());
  out[text.size()] = '\0';
  return static_cast<int>(text.size());
}

// The calling thread's stack as "file\tfunction\tline\n" lines, innermost first: the number of
// frames, or -1 when a frame could not be described or `out` is too small.
// `soft`: names and lines read as for a borrowed stack (soft reads, CPython's line tables decoded
// by trainshim), on this thread's own frames, so that traceback can check them.
int stack_text(char* out, int capacity, int max_frames, bool soft) {
  py::RawFrame frames[256];
  if (max_frames > 256) return -1;
  const int count = py::capture(frames, max_frames).count;
  std::string text;
  for (int i = 0; i < count; ++i) {
    py::CodeInfo info;
    if (!py::describe_code(frames[i].code, soft, info)) return -1;
    const int line = py::line_of(frames[i].code, frames[i].offset, soft);
    text += info.file + "\t" + info.function + "\t" + std::to_string(line) + "\n";
  }
  return copy_out(text, out, capacity) < 0 ? -1 : count;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int probe_version(char* out, int capacity) {
  return copy_out(py::interpreter_version(), out, capacity);
}

extern "C" __attribute__((visibility("default"))) int probe_layout(char* out, int capacity) {
  return copy_out(py::detail::layout_report(), out, capacity);
}

extern "C" __attribute__((visibility("default"))) int probe_stack(char* out, int capacity, int max_frames) {
  return stack_text(out, capacity, max_frames, false);
}

extern "C" __attribute__((visibility("default"))) int probe_stack_soft(char* out, int capacity, int max_frames) {
  return stack_text(out, capacity, max_frames, true);
}

// python_stacks_word() of this process.
extern "C" __attribute__((visibility("default"))) unsigned probe_status() { return py::stacks_status(); }

// Mean nanoseconds of one capture of at most `max_frames` frames over `iterations` calls; the
// frames the last one found go to `*found`.
extern "C" __attribute__((visibility("default"))) double probe_capture_ns(int iterations, int max_frames, int* found) {
  py::RawFrame frames[256];
  if (max_frames > 256 || iterations <= 0) return -1;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) *found = py::capture(frames, max_frames).count;
  const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iterations;
}

// How many frames of the thread whose pthread_t is `thread_id` capture_thread read, as the sampler
// reads them; -1 when it called them torn.
extern "C" __attribute__((visibility("default"))) int probe_thread(uint64_t thread_id, int max_frames) {
  py::RawFrame frames[256];
  if (max_frames > 256) return -1;
  py::ThreadHint hint;
  bool torn = false;
  const int count = py::capture_thread(thread_id, false, hint, frames, max_frames, torn).count;
  return torn ? -1 : count;
}

// Frames seen from a thread the process started outside Python: it has no thread state.
extern "C" __attribute__((visibility("default"))) int probe_foreign_thread() {
  int count = -1;
  std::thread([&count] {
    py::RawFrame frames[8];
    count = py::capture(frames, 8).count;
  }).join();
  return count;
}
