/* Prints, as key=value lines, the offsets and constants that shim/core/python_stack.cpp hard-codes
 * for this CPython version, taken from the version's own headers. check_layout.py compiles it
 * against each interpreter's headers and compares the output with the shim's table. */
#define Py_BUILD_CORE 1
#include <Python.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#else
#include <frameobject.h>
#endif
#include "internal/pycore_interp.h"
#if PY_VERSION_HEX >= 0x030D0000
#include "internal/pycore_runtime.h"
#endif

#define PRINT(key, value) printf("%s=%ld\n", key, (long)(value))

/* The lowest set bit of a PyASCIIObject state word after `set` ran on a zeroed object. */
#define STATE_BIT(key, field, value)      \
  do {                                    \
    PyASCIIObject o;                      \
    unsigned int word;                    \
    memset(&o, 0, sizeof o);              \
    o.state.field = value;                \
    memcpy(&word, &o.state, sizeof word); \
    PRINT(key, __builtin_ctz(word));      \
  } while (0)

int main(void) {
  printf("version=%d.%d\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
  PRINT("object.type", offsetof(PyObject, ob_type));
  PRINT("object.size", offsetof(PyVarObject, ob_size));
  PRINT("type.basicsize", offsetof(PyTypeObject, tp_basicsize));
  PRINT("code.filename", offsetof(PyCodeObject, co_filename));
  PRINT("code.name", offsetof(PyCodeObject, co_name));
  PRINT("code.firstlineno", offsetof(PyCodeObject, co_firstlineno));
  PRINT("code.linetable", offsetof(PyCodeObject, co_linetable));
  PRINT("bytes.size", offsetof(PyVarObject, ob_size));
  PRINT("bytes.data", offsetof(PyBytesObject, ob_sval));
  PRINT("tstate.next", offsetof(PyThreadState, next));
  PRINT("tstate.interp", offsetof(PyThreadState, interp));
  PRINT("tstate.thread_id", offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX >= 0x030B0000
  PRINT("tstate.native_thread_id", offsetof(PyThreadState, native_thread_id));
  PRINT("interp.threads_head", offsetof(PyInterpreterState, threads.head));
#else
  PRINT("interp.threads_head", offsetof(PyInterpreterState, tstate_head));
#endif
  PRINT("unicode.length", offsetof(PyASCIIObject, length));
  PRINT("unicode.state", offsetof(PyASCIIObject, state));
  PRINT("unicode.ascii_size", sizeof(PyASCIIObject));
  PRINT("unicode.compact_size", sizeof(PyCompactUnicodeObject));
  STATE_BIT("unicode.kind_shift", kind, 1);
  STATE_BIT("unicode.compact_bit", compact, 1);
  STATE_BIT("unicode.ascii_bit", ascii, 1);
#if PY_VERSION_HEX < 0x030B0000
  PRINT("tstate.frame", offsetof(PyThreadState, frame));
  PRINT("frame.previous", offsetof(PyFrameObject, f_back));
  PRINT("frame.code", offsetof(PyFrameObject, f_code));
  PRINT("frame.instr", offsetof(PyFrameObject, f_lasti));
  PRINT("frame.state", offsetof(PyFrameObject, f_state));
#else
  PRINT("code.firsttraceable", offsetof(PyCodeObject, _co_firsttraceable));
  PRINT("code.adaptive", offsetof(PyCodeObject, co_code_adaptive));
  PRINT("frame.previous", offsetof(_PyInterpreterFrame, previous));
  PRINT("frame.owner", offsetof(_PyInterpreterFrame, owner));
  PRINT("owner.generator", FRAME_OWNED_BY_GENERATOR);
#if PY_VERSION_HEX < 0x030D0000
  PRINT("tstate.frame", offsetof(PyThreadState, cframe));
  PRINT("cframe.current_frame", offsetof(_PyCFrame, current_frame));
  PRINT("frame.code", offsetof(_PyInterpreterFrame, f_code));
  PRINT("frame.instr", offsetof(_PyInterpreterFrame, prev_instr));
#else
  PRINT("tstate.frame", offsetof(PyThreadState, current_frame));
  PRINT("frame.code", offsetof(_PyInterpreterFrame, f_executable));
  PRINT("frame.instr", offsetof(_PyInterpreterFrame, instr_ptr));
  PRINT("debug.version", offsetof(_Py_DebugOffsets, version));
  PRINT("debug.free_threaded", offsetof(_Py_DebugOffsets, free_threaded));
  PRINT("debug.thread_state.current_frame", offsetof(_Py_DebugOffsets, thread_state.current_frame));
  PRINT("debug.interpreter_frame.previous", offsetof(_Py_DebugOffsets, interpreter_frame.previous));
  PRINT("debug.interpreter_frame.executable", offsetof(_Py_DebugOffsets, interpreter_frame.executable));
  PRINT("debug.interpreter_frame.instr_ptr", offsetof(_Py_DebugOffsets, interpreter_frame.instr_ptr));
  PRINT("debug.interpreter_frame.owner", offsetof(_Py_DebugOffsets, interpreter_frame.owner));
  PRINT("debug.code_object.filename", offsetof(_Py_DebugOffsets, code_object.filename));
  PRINT("debug.code_object.name", offsetof(_Py_DebugOffsets, code_object.name));
  PRINT("debug.code_object.firstlineno", offsetof(_Py_DebugOffsets, code_object.firstlineno));
  PRINT("debug.code_object.linetable", offsetof(_Py_DebugOffsets, code_object.linetable));
  PRINT("debug.code_object.co_code_adaptive", offsetof(_Py_DebugOffsets, code_object.co_code_adaptive));
  PRINT("debug.pyobject.ob_type", offsetof(_Py_DebugOffsets, pyobject.ob_type));
  PRINT("debug.unicode_object.state", offsetof(_Py_DebugOffsets, unicode_object.state));
  PRINT("debug.unicode_object.length", offsetof(_Py_DebugOffsets, unicode_object.length));
  PRINT("debug.unicode_object.asciiobject_size", offsetof(_Py_DebugOffsets, unicode_object.asciiobject_size));
  PRINT("debug.thread_state.thread_id", offsetof(_Py_DebugOffsets, thread_state.thread_id));
  PRINT("debug.thread_state.native_thread_id", offsetof(_Py_DebugOffsets, thread_state.native_thread_id));
  PRINT("debug.interpreter_state.threads_head", offsetof(_Py_DebugOffsets, interpreter_state.threads_head));
#endif
#if PY_VERSION_HEX >= 0x030C0000
  PRINT("owner.cstack", FRAME_OWNED_BY_CSTACK);
#endif
#endif
  return 0;
}
