// A process that looks like a CPython trainshim must leave alone: the symbols the shim looks up,
// with the values a free-threaded build or a newer release has. Usage: fake_runtime 3.13t|3.14|3.14t
// Exits 0 when the shim reads no frame and says why.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "core/python_stack.hpp"

namespace py = trainshim::shim::python;

extern "C" {
// Py_Version (3.11+) and the head of _PyRuntime, _Py_DebugOffsets (3.13+): the cookie, the
// version, free_threaded (Include/internal/pycore_debug_offsets.h).
__attribute__((visibility("default"))) unsigned long Py_Version = 0;
alignas(8) __attribute__((visibility("default"))) unsigned char _PyRuntime[64] = {};
alignas(8) __attribute__((visibility("default"))) unsigned char PyCode_Type[512] = {};
alignas(8) __attribute__((visibility("default"))) unsigned char PyUnicode_Type[512] = {};
__attribute__((visibility("default"))) const void* PyGILState_GetThisThreadState() { return &PyCode_Type; }
}

int main(int argc, char** argv) {
  const std::string_view build = argc > 1 ? argv[1] : "";
  const bool free_threaded = build.ends_with("t");
  const int minor = build.starts_with("3.13") ? 13 : 14;
  Py_Version = 0x030000F0ul | static_cast<unsigned long>(minor) << 16;  // 3.minor.0 final
  const uint64_t version = Py_Version;
  const uint64_t threaded = free_threaded ? 1 : 0;
  std::memcpy(_PyRuntime, "xdebugpy", 8);
  std::memcpy(_PyRuntime + 8, &version, sizeof version);
  std::memcpy(_PyRuntime + 16, &threaded, sizeof threaded);

  const auto expected = trainshim::python_stacks_word(
      free_threaded ? trainshim::PythonStacks::FreeThreaded : trainshim::PythonStacks::UnsupportedVersion, minor);
  py::RawFrame frames[8];
  const int count = py::capture(frames, 8).count;
  const uint32_t status = py::stacks_status();
  std::printf("%s: %d frames, status %#x (expected %#x), version '%s'\n", argv[1], count, status, expected,
              std::string(py::interpreter_version()).c_str());
  return count == 0 && status == expected && py::interpreter_version().empty() ? 0 : 1;
}
