#include "python_stack.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstring>

namespace trainshim::shim::python {

namespace {

// Byte positions of the offsets 3.13 publishes in _Py_DebugOffsets, at the start of _PyRuntime.
struct DebugPositions {
  int32_t version, free_threaded, tstate_current_frame, frame_previous, frame_executable,
      frame_instr_ptr, frame_owner, code_filename, code_name, code_firstlineno, code_adaptive,
      object_type, unicode_state, unicode_length, unicode_ascii_size;
};

// Where each field lives in one CPython version (LP64, default non-debug build); -1 where the
// version has no such field. tests/python_stack/layout.c prints the same values from the headers.
struct Layout {
  int minor = -1;
  bool frame_objects = false;    // 3.10: PyFrameObject chain with f_lasti in code units
  int32_t tstate_frame = -1;     // PyThreadState: frame (3.10), cframe (3.11, 3.12), current_frame (3.13)
  int32_t cframe_current = -1;   // _PyCFrame.current_frame; -1 where tstate_frame is the frame itself
  int32_t frame_previous = -1;   // f_back / previous
  int32_t frame_code = -1;       // f_code / f_executable
  int32_t frame_instr = -1;      // f_lasti (int) / prev_instr / instr_ptr (pointers)
  int32_t frame_owner = -1;      // a char
  int32_t owner_generator = -1;  // FRAME_OWNED_BY_GENERATOR
  int32_t owner_cstack = -1;     // FRAME_OWNED_BY_CSTACK (3.12+)
  int32_t code_filename = -1, code_name = -1, code_firstlineno = -1;
  int32_t code_firsttraceable = -1, code_adaptive = -1;  // 3.11+
  int32_t object_type = 8, object_size = 16;              // ob_type, ob_size (code units, 3.11+)
  int32_t unicode_length = 16, unicode_state = 32, unicode_ascii_size = -1, unicode_compact_size = -1;
  int32_t kind_shift = 2, compact_bit = 5, ascii_bit = 6;  // bits of PyASCIIObject.state
  bool from_debug_offsets = false;  // the fields DebugPositions names are read from _PyRuntime
  DebugPositions debug{};
};

constexpr Layout kLayouts[] = {
    {.minor = 10, .frame_objects = true, .tstate_frame = 24, .frame_previous = 24, .frame_code = 32,
     .frame_instr = 96, .code_filename = 104, .code_name = 112, .code_firstlineno = 40,
     .unicode_ascii_size = 48, .unicode_compact_size = 72},
    {.minor = 11, .tstate_frame = 56, .cframe_current = 8, .frame_previous = 48, .frame_code = 32,
     .frame_instr = 56, .frame_owner = 69, .owner_generator = 1, .code_filename = 112,
     .code_name = 120, .code_firstlineno = 72, .code_firsttraceable = 168, .code_adaptive = 184,
     .unicode_ascii_size = 48, .unicode_compact_size = 72},
    {.minor = 12, .tstate_frame = 56, .cframe_current = 0, .frame_previous = 8, .frame_code = 0,
     .frame_instr = 56, .frame_owner = 70, .owner_generator = 1, .owner_cstack = 3,
     .code_filename = 112, .code_name = 120, .code_firstlineno = 68, .code_firsttraceable = 176,
     .code_adaptive = 192, .unicode_ascii_size = 40, .unicode_compact_size = 56},
    // _Py_DebugOffsets has no _co_firsttraceable nor sizeof(PyCompactUnicodeObject): those two
    // come from here, like the owner values and the state bits.
    {.minor = 13, .owner_generator = 1, .owner_cstack = 3, .code_firsttraceable = 184,
     .unicode_compact_size = 56, .from_debug_offsets = true,
     .debug = {.version = 8, .free_threaded = 16, .tstate_current_frame = 184, .frame_previous = 232,
               .frame_executable = 240, .frame_instr_ptr = 248, .frame_owner = 264,
               .code_filename = 280, .code_name = 288, .code_firstlineno = 312, .code_adaptive = 344,
               .object_type = 360, .unicode_state = 544, .unicode_length = 552,
               .unicode_ascii_size = 560}},
};

using GetThreadState = const void* (*)();
using Addr2Line = int (*)(const void*, int);

struct Runtime {
  GetThreadState thread_state = nullptr;
  Addr2Line addr2line = nullptr;  // optional: without it lines are first lines
  const void* code_type = nullptr;
  const void* unicode_type = nullptr;
  Layout layout;
  char version[8] = {};
};

enum State : int { kUnresolved, kResolving, kReady, kDisabled };
std::atomic<int> g_state{kUnresolved};
// Written only by the thread that moved g_state out of kUnresolved, read only after kReady.
Runtime g_runtime;

constexpr int kMaxWalk = 4096;        // frames visited per capture, skipped ones included
constexpr int64_t kMaxString = 4096;  // code points in a file or function name
constexpr int32_t kTypeBasicSize = 32;  // PyTypeObject.tp_basicsize, after PyObject_VAR_HEAD and tp_name

template <typename T>
T load(const char* base, int32_t offset) {
  T value;
  std::memcpy(&value, base + offset, sizeof value);
  return value;
}

bool plausible(const void* pointer) {
  const auto value = reinterpret_cast<uintptr_t>(pointer);
  return value >= 4096 && (value & 7) == 0;
}

bool is_code(const Runtime& runtime, const char* code) {
  return plausible(code) && load<const void*>(code, runtime.layout.object_type) == runtime.code_type;
}

void* symbol(const char* name) { return dlsym(RTLD_DEFAULT, name); }

// The minor version of the Python 3 in the process, -1 when there is none.
int python_minor() {
  if (const auto* hex = static_cast<const unsigned long*>(symbol("Py_Version"))) {  // 3.11+
    return (*hex >> 24) == 3 ? static_cast<int>((*hex >> 16) & 0xff) : -1;
  }
  const auto get_version = reinterpret_cast<const char* (*)()>(symbol("Py_GetVersion"));
  if (!get_version) return -1;
  const char* text = get_version();  // "3.10.13 (main, ...)"
  if (!text || text[0] != '3' || text[1] != '.') return -1;
  int minor = 0;
  const char* digit = text + 2;
  for (; *digit >= '0' && *digit <= '9' && minor < 100; ++digit) minor = minor * 10 + (*digit - '0');
  return digit > text + 2 && *digit == '.' ? minor : -1;
}

// Fills the fields 3.13 publishes from its _Py_DebugOffsets, after checking that it is one.
bool read_debug_offsets(Layout& layout) {
  const auto* runtime = static_cast<const char*>(symbol("_PyRuntime"));
  const DebugPositions& at = layout.debug;
  if (!runtime || std::memcmp(runtime, "xdebugpy", 8) != 0) return false;
  const uint64_t major_minor = 0x03u << 8 | static_cast<unsigned>(layout.minor);
  if (load<uint64_t>(runtime, at.version) >> 16 != major_minor) return false;
  if (load<uint64_t>(runtime, at.free_threaded) != 0) return false;  // another object header
  bool sane = true;
  const auto read = [&](int32_t position, int32_t& field) {
    const auto value = load<uint64_t>(runtime, position);
    sane = sane && value < 4096;
    field = static_cast<int32_t>(value);
  };
  read(at.tstate_current_frame, layout.tstate_frame);
  read(at.frame_previous, layout.frame_previous);
  read(at.frame_executable, layout.frame_code);
  read(at.frame_instr_ptr, layout.frame_instr);
  read(at.frame_owner, layout.frame_owner);
  read(at.code_filename, layout.code_filename);
  read(at.code_name, layout.code_name);
  read(at.code_firstlineno, layout.code_firstlineno);
  read(at.code_adaptive, layout.code_adaptive);
  read(at.object_type, layout.object_type);
  read(at.unicode_state, layout.unicode_state);
  read(at.unicode_length, layout.unicode_length);
  read(at.unicode_ascii_size, layout.unicode_ascii_size);
  return sane;
}

// The type objects state their instances' sizes: a layout that disagrees with them belongs to
// another build (debug or free-threaded object headers, a release that moved fields) and is not
// used.
bool sizes_agree(const Runtime& runtime) {
  const Layout& l = runtime.layout;
  // PyUnicodeObject is PyCompactUnicodeObject plus the pointer to non-compact data.
  const auto* unicode_type = static_cast<const char*>(runtime.unicode_type);
  if (load<int64_t>(unicode_type, kTypeBasicSize) != l.unicode_compact_size + 8) return false;
  // 3.11+ code objects end with co_code_adaptive, which their type counts as the variable part.
  const auto* code_type = static_cast<const char*>(runtime.code_type);
  return l.code_adaptive < 0 || load<int64_t>(code_type, kTypeBasicSize) == l.code_adaptive;
}

bool resolve(Runtime& runtime) {
  runtime.thread_state = reinterpret_cast<GetThreadState>(symbol("PyGILState_GetThisThreadState"));
  runtime.code_type = symbol("PyCode_Type");
  runtime.unicode_type = symbol("PyUnicode_Type");
  runtime.addr2line = reinterpret_cast<Addr2Line>(symbol("PyCode_Addr2Line"));
  if (!runtime.thread_state || !runtime.code_type || !runtime.unicode_type) return false;
  // 3.14+ keeps tagged references in its frames and reshaped _Py_DebugOffsets: left alone.
  const int minor = python_minor();
  const Layout* layout = nullptr;
  for (const Layout& candidate : kLayouts) {
    if (candidate.minor == minor) layout = &candidate;
  }
  if (!layout) return false;
  runtime.layout = *layout;
  if (layout->from_debug_offsets && !read_debug_offsets(runtime.layout)) return false;
  if (!sizes_agree(runtime)) return false;
  runtime.version[0] = '3';
  runtime.version[1] = '.';
  runtime.version[2] = static_cast<char>('0' + minor / 10);
  runtime.version[3] = static_cast<char>('0' + minor % 10);
  return true;
}

const Runtime* resolved_slow() {
  int state = kUnresolved;
  if (!g_state.compare_exchange_strong(state, kResolving, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
    return state == kReady ? &g_runtime : nullptr;  // resolved, disabled or being resolved
  }
  const bool ready = resolve(g_runtime);
  g_state.store(ready ? kReady : kDisabled, std::memory_order_release);
  return ready ? &g_runtime : nullptr;
}

inline const Runtime* resolved() {
  if (g_state.load(std::memory_order_acquire) == kReady) [[likely]] return &g_runtime;
  return resolved_slow();
}

// 3.10: the PyFrameObject chain; f_lasti counts code units, -1 before the first instruction.
int walk_frame_objects(const Runtime& runtime, const char* tstate, RawFrame* out, int max) {
  const Layout& l = runtime.layout;
  const char* frame = load<const char*>(tstate, l.tstate_frame);
  int count = 0;
  for (int walked = 0; count < max && walked < kMaxWalk && plausible(frame); ++walked) {
    const char* code = load<const char*>(frame, l.frame_code);
    const auto lasti = load<int32_t>(frame, l.frame_instr);
    if (is_code(runtime, code)) out[count++] = {code, lasti >= 0 && lasti < (1 << 30) ? lasti * 2 : -1};
    frame = load<const char*>(frame, l.frame_previous);
  }
  return count;
}

// 3.11+: the _PyInterpreterFrame chain. Skips what CPython's own tracebacks skip: frames the C
// stack owns (entry frames, 3.12+) and frames still before their first traceable instruction.
int walk_interpreter_frames(const Runtime& runtime, const char* tstate, RawFrame* out, int max) {
  const Layout& l = runtime.layout;
  const char* frame = load<const char*>(tstate, l.tstate_frame);
  if (l.cframe_current >= 0) frame = plausible(frame) ? load<const char*>(frame, l.cframe_current) : nullptr;
  int count = 0;
  for (int walked = 0; count < max && walked < kMaxWalk && plausible(frame); ++walked) {
    const char* code = load<const char*>(frame, l.frame_code);
    const int owner = load<unsigned char>(frame, l.frame_owner);
    if (owner != l.owner_cstack && is_code(runtime, code)) {
      // Byte offset from _PyCode_CODE(code): prev_instr (3.11, 3.12) or instr_ptr (3.13), as
      // CPython's _PyInterpreterFrame_LASTI computes it, so the line is the one f_lineno reports.
      const auto instr = reinterpret_cast<uintptr_t>(load<const char*>(frame, l.frame_instr));
      const auto start = reinterpret_cast<uintptr_t>(code + l.code_adaptive);
      const int64_t offset = static_cast<int64_t>(instr - start);
      const int64_t traceable = int64_t{load<int32_t>(code, l.code_firsttraceable)} * 2;
      if ((owner == l.owner_generator || offset >= traceable) && offset >= 0 && offset < INT32_MAX) {
        out[count++] = {code, static_cast<int32_t>(offset)};
      }
    }
    frame = load<const char*>(frame, l.frame_previous);
  }
  return count;
}

void append_utf8(std::string& out, uint32_t c) {
  // A lone surrogate from surrogateescape stands for the undecodable byte (os.fsencode's view).
  if (c >= 0xDC80 && c <= 0xDCFF) {
    out += static_cast<char>(c - 0xDC00);
    return;
  }
  if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) c = 0xFFFD;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | c >> 6);
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | c >> 12);
    out += static_cast<char>(0x80 | (c >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | c >> 18);
    out += static_cast<char>(0x80 | (c >> 12 & 0x3F));
    out += static_cast<char>(0x80 | (c >> 6 & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// A compact str (what the compiler and unmarshal create) as UTF-8; false for anything else.
bool read_unicode(const Runtime& runtime, const char* object, std::string& out) {
  const Layout& l = runtime.layout;
  if (!plausible(object) || load<const void*>(object, l.object_type) != runtime.unicode_type) return false;
  const auto length = load<int64_t>(object, l.unicode_length);
  const auto state = load<uint32_t>(object, l.unicode_state);
  const unsigned kind = state >> l.kind_shift & 7;
  const bool ascii = (state >> l.ascii_bit & 1) != 0;
  if (length < 0 || length >= kMaxString || !(state >> l.compact_bit & 1)) return false;
  if ((kind != 1 && kind != 2 && kind != 4) || (ascii && kind != 1)) return false;
  const char* data = object + (ascii ? l.unicode_ascii_size : l.unicode_compact_size);
  out.clear();
  if (ascii) {
    out.assign(data, static_cast<size_t>(length));
    return true;
  }
  for (int64_t i = 0; i < length; ++i) {
    const char* unit = data + i * kind;
    const uint32_t c = kind == 1   ? load<uint8_t>(unit, 0)
                       : kind == 2 ? load<uint16_t>(unit, 0)
                                   : load<uint32_t>(unit, 0);
    append_utf8(out, c);
  }
  return true;
}

}  // namespace

int capture(RawFrame* out, int max) {
  const Runtime* runtime = resolved();
  if (!runtime || max <= 0) return 0;
  const auto* tstate = static_cast<const char*>(runtime->thread_state());
  if (!plausible(tstate)) return 0;
  return runtime->layout.frame_objects ? walk_frame_objects(*runtime, tstate, out, max)
                                       : walk_interpreter_frames(*runtime, tstate, out, max);
}

bool describe_code(const void* code, CodeInfo& out) {
  const Runtime* runtime = resolved();
  const auto* object = static_cast<const char*>(code);
  if (!runtime || !is_code(*runtime, object)) return false;
  const Layout& l = runtime->layout;
  return read_unicode(*runtime, load<const char*>(object, l.code_filename), out.file) &&
         read_unicode(*runtime, load<const char*>(object, l.code_name), out.function);
}

int line_of(const void* code, int32_t offset) {
  const Runtime* runtime = resolved();
  const auto* object = static_cast<const char*>(code);
  if (!runtime || !is_code(*runtime, object)) return 0;
  const Layout& l = runtime->layout;
  const int first = load<int32_t>(object, l.code_firstlineno);
  if (offset < 0 || !runtime->addr2line) return first;
  // 3.11+ code objects count their code units in ob_size; 3.11's line array has no bound check.
  if (l.code_adaptive >= 0 && offset >= load<int64_t>(object, l.object_size) * 2) return first;
  return runtime->addr2line(code, offset);
}

std::string_view interpreter_version() {
  const Runtime* runtime = resolved();
  return runtime ? std::string_view(runtime->version) : std::string_view();
}

std::string detail::layout_report() {
  const Runtime* runtime = resolved();
  if (!runtime) return {};
  const Layout& l = runtime->layout;
  std::string report = "version=" + std::string(runtime->version) + "\n";
  const auto add = [&](const char* key, int32_t value) {
    if (value >= 0) report += std::string(key) + "=" + std::to_string(value) + "\n";
  };
  add("object.type", l.object_type);
  add("object.size", l.object_size);
  add("type.basicsize", kTypeBasicSize);
  add("code.filename", l.code_filename);
  add("code.name", l.code_name);
  add("code.firstlineno", l.code_firstlineno);
  add("code.firsttraceable", l.code_firsttraceable);
  add("code.adaptive", l.code_adaptive);
  add("unicode.length", l.unicode_length);
  add("unicode.state", l.unicode_state);
  add("unicode.ascii_size", l.unicode_ascii_size);
  add("unicode.compact_size", l.unicode_compact_size);
  add("unicode.kind_shift", l.kind_shift);
  add("unicode.compact_bit", l.compact_bit);
  add("unicode.ascii_bit", l.ascii_bit);
  add("tstate.frame", l.tstate_frame);
  add("cframe.current_frame", l.cframe_current);
  add("frame.previous", l.frame_previous);
  add("frame.code", l.frame_code);
  add("frame.instr", l.frame_instr);
  add("frame.owner", l.frame_owner);
  add("owner.generator", l.owner_generator);
  add("owner.cstack", l.owner_cstack);
  if (l.from_debug_offsets) {
    const DebugPositions& d = l.debug;
    add("debug.version", d.version);
    add("debug.free_threaded", d.free_threaded);
    add("debug.thread_state.current_frame", d.tstate_current_frame);
    add("debug.interpreter_frame.previous", d.frame_previous);
    add("debug.interpreter_frame.executable", d.frame_executable);
    add("debug.interpreter_frame.instr_ptr", d.frame_instr_ptr);
    add("debug.interpreter_frame.owner", d.frame_owner);
    add("debug.code_object.filename", d.code_filename);
    add("debug.code_object.name", d.code_name);
    add("debug.code_object.firstlineno", d.code_firstlineno);
    add("debug.code_object.co_code_adaptive", d.code_adaptive);
    add("debug.pyobject.ob_type", d.object_type);
    add("debug.unicode_object.state", d.unicode_state);
    add("debug.unicode_object.length", d.unicode_length);
    add("debug.unicode_object.asciiobject_size", d.unicode_ascii_size);
  }
  return report;
}

}  // namespace trainshim::shim::python
