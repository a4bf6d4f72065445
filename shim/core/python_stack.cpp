#include "python_stack.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>

#include "soft_read.hpp"

namespace trainshim::shim::python {

namespace {

// Byte positions of the offsets 3.13 publishes in _Py_DebugOffsets, at the start of _PyRuntime.
struct DebugPositions {
  int32_t version, free_threaded, tstate_current_frame, frame_previous, frame_executable, frame_instr_ptr, frame_owner,
      code_filename, code_name, code_firstlineno, code_linetable, code_adaptive, object_type, unicode_state,
      unicode_length, unicode_ascii_size, tstate_thread_id, tstate_native_thread_id, interp_threads_head;
};

// Where each field lives in one CPython version (LP64, default non-debug build); -1 where the
// version has no such field. tests/python_stack/layout.c prints the same values from the headers.
struct Layout {
  int minor = -1;
  bool frame_objects = false;            // 3.10: PyFrameObject chain with f_lasti in code units
  int32_t tstate_frame = -1;             // PyThreadState: frame (3.10), cframe (3.11, 3.12), current_frame (3.13)
  int32_t tstate_thread_id = -1;         // PyThreadState.thread_id: the pthread_t of its thread
  int32_t tstate_native_thread_id = -1;  // PyThreadState.native_thread_id: its kernel id (3.11+)
  int32_t interp_threads_head = -1;      // PyInterpreterState: tstate_head (3.10), threads.head (3.11+)
  int32_t cframe_current = -1;           // _PyCFrame.current_frame; -1 where tstate_frame is the frame itself
  int32_t frame_previous = -1;           // f_back / previous
  int32_t frame_code = -1;               // f_code / f_executable
  int32_t frame_instr = -1;              // f_lasti (int) / prev_instr / instr_ptr (pointers)
  int32_t frame_state = -1;              // f_state (3.10: a signed char, FRAME_EXECUTING = 0, FRAME_UNWINDING = 2)
  int32_t frame_owner = -1;              // a char
  int32_t owner_generator = -1;          // FRAME_OWNED_BY_GENERATOR
  int32_t owner_cstack = -1;             // FRAME_OWNED_BY_CSTACK (3.12+)
  int32_t code_filename = -1, code_name = -1, code_firstlineno = -1;
  int32_t code_linetable = -1;                           // co_linetable (a bytes object)
  int32_t code_firsttraceable = -1, code_adaptive = -1;  // 3.11+
  int32_t object_type = 8, object_size = 16;             // ob_type, ob_size (code units, 3.11+)
  int32_t unicode_length = 16, unicode_state = 32, unicode_ascii_size = -1, unicode_compact_size = -1;
  int32_t kind_shift = 2, compact_bit = 5, ascii_bit = 6;  // bits of PyASCIIObject.state
  bool from_debug_offsets = false;                         // the fields DebugPositions names are read from _PyRuntime
  DebugPositions debug{};
};

constexpr Layout kLayouts[] = {
    {.minor = 10,
     .frame_objects = true,
     .tstate_frame = 24,
     .tstate_thread_id = 176,
     .interp_threads_head = 8,
     .frame_previous = 24,
     .frame_code = 32,
     .frame_instr = 96,
     .frame_state = 108,
     .code_filename = 104,
     .code_name = 112,
     .code_firstlineno = 40,
     .code_linetable = 120,
     .unicode_ascii_size = 48,
     .unicode_compact_size = 72},
    {.minor = 11,
     .tstate_frame = 56,
     .tstate_thread_id = 152,
     .tstate_native_thread_id = 160,
     .interp_threads_head = 16,
     .cframe_current = 8,
     .frame_previous = 48,
     .frame_code = 32,
     .frame_instr = 56,
     .frame_owner = 69,
     .owner_generator = 1,
     .code_filename = 112,
     .code_name = 120,
     .code_firstlineno = 72,
     .code_linetable = 136,
     .code_firsttraceable = 168,
     .code_adaptive = 184,
     .unicode_ascii_size = 48,
     .unicode_compact_size = 72},
    {.minor = 12,
     .tstate_frame = 56,
     .tstate_thread_id = 136,
     .tstate_native_thread_id = 144,
     .interp_threads_head = 72,
     .cframe_current = 0,
     .frame_previous = 8,
     .frame_code = 0,
     .frame_instr = 56,
     .frame_owner = 70,
     .owner_generator = 1,
     .owner_cstack = 3,
     .code_filename = 112,
     .code_name = 120,
     .code_firstlineno = 68,
     .code_linetable = 136,
     .code_firsttraceable = 176,
     .code_adaptive = 192,
     .unicode_ascii_size = 40,
     .unicode_compact_size = 56},
    // _Py_DebugOffsets has no _co_firsttraceable nor sizeof(PyCompactUnicodeObject): those two
    // come from here, like the owner values and the state bits.
    {.minor = 13,
     .owner_generator = 1,
     .owner_cstack = 3,
     .code_firsttraceable = 184,
     .unicode_compact_size = 56,
     .from_debug_offsets = true,
     .debug = {.version = 8,
               .free_threaded = 16,
               .tstate_current_frame = 184,
               .frame_previous = 232,
               .frame_executable = 240,
               .frame_instr_ptr = 248,
               .frame_owner = 264,
               .code_filename = 280,
               .code_name = 288,
               .code_firstlineno = 312,
               .code_linetable = 304,
               .code_adaptive = 344,
               .object_type = 360,
               .unicode_state = 544,
               .unicode_length = 552,
               .unicode_ascii_size = 560,
               .tstate_thread_id = 192,
               .tstate_native_thread_id = 200,
               .interp_threads_head = 72}},
};

using GetThreadState = const void* (*)();
using Addr2Line = int (*)(const void*, int);
using ThreadHead = const void* (*)(const void*);
using MainInterpreter = const void* (*)();

struct Runtime {
  GetThreadState thread_state = nullptr;
  Addr2Line addr2line = nullptr;               // optional: without it lines are first lines
  ThreadHead thread_head = nullptr;            // PyInterpreterState_ThreadHead; optional: no borrowed stacks
  MainInterpreter main_interpreter = nullptr;  // PyInterpreterState_Main; optional: no other threads' stacks
  const void* code_type = nullptr;
  const void* unicode_type = nullptr;
  const void* bytes_type = nullptr;
  Layout layout;
  char version[8] = {};
};

enum State : int { kUnresolved, kResolving, kReady, kDisabled };
std::atomic<int> g_state{kUnresolved};
// Written only by the thread that moved g_state out of kUnresolved, read only after kReady.
Runtime g_runtime;
// python_stacks_word() of the resolution, 0 until it finished.
std::atomic<uint32_t> g_status{0};

constexpr int kMaxWalk = 4096;        // frames visited per capture, skipped ones included
constexpr int kMaxThreads = 4096;     // thread states visited when looking for the one in backward
constexpr int64_t kMaxString = 4096;  // code points in a file or function name
constexpr int64_t kMaxLineTable = 1 << 20;
constexpr int32_t kTypeBasicSize = 32;  // PyTypeObject.tp_basicsize, after PyObject_VAR_HEAD and tp_name
// PyThreadState's first fields, the same in 3.10 to 3.13: prev, next, interp.
constexpr int32_t kThreadStateNext = 8;
constexpr int32_t kThreadStateInterp = 16;
// PyBytesObject: ob_size (PyObject_VAR_HEAD), then ob_shash, then the bytes.
constexpr int32_t kBytesSize = 16;
constexpr int32_t kBytesData = 32;

template <typename T>
T load(const char* base, int32_t offset) {
  T value;
  std::memcpy(&value, base + offset, sizeof value);
  return value;
}

bool plausible(const void* pointer) {
  const auto value = reinterpret_cast<uintptr_t>(pointer);
  return value >= 4096 && (value & 7) == 0 && value < (uintptr_t{1} << 56);
}

// Plain loads: the calling thread's own frames and code objects, which cannot change or go away
// while it sits in a hook.
struct DirectReader {
  template <typename T>
  bool get(const char* base, int32_t offset, T& value) {
    value = load<T>(base, offset);
    return true;
  }
  bool copy(void* to, const char* from, std::size_t bytes) {
    std::memcpy(to, from, bytes);
    return true;
  }
};

// Reads of memory that another thread may free at any moment (its frames, its thread state),
// through SoftMemory (soft_read.hpp): an unmapped address is a failed read where a load would
// fault. Loads go through a few cached aligned blocks (never across a page), least recently used
// evicted first: 3.11+ frames sit side by side in their thread's data stack, and a code object's
// fields fit in one block. Each new block is one system call: the sampler, which walks whole chains
// on its own thread, reads whole pages; a hook, on the program's thread and stack, smaller blocks.
template <uintptr_t kBlock, int kBlocks>
class BasicSoftReader {
 public:
  template <typename T>
  bool get(const char* base, int32_t offset, T& value) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(offset);
    const uintptr_t start = address & ~(kBlock - 1);
    if (address + sizeof value > start + kBlock)
      return copy(&value, reinterpret_cast<const char*>(address), sizeof value);
    Block* block = nullptr;
    Block* oldest = &blocks_[0];
    for (Block& b : blocks_) {
      if (b.start == start) block = &b;
      if (b.used < oldest->used) oldest = &b;
    }
    if (!block) {
      block = oldest;
      block->start = 0;
      if (!copy(block->bytes, reinterpret_cast<const char*>(start), kBlock)) return false;
      block->start = start;
    }
    block->used = ++uses_;
    std::memcpy(&value, block->bytes + (address - start), sizeof value);
    return true;
  }
  bool copy(void* to, const char* from, std::size_t bytes) { return memory_.read(to, from, bytes); }
  pid_t process() const { return memory_.process(); }

 private:
  static_assert(kBlock <= 4096 && (kBlock & (kBlock - 1)) == 0);
  struct Block {
    uintptr_t start = 0;
    uint64_t used = 0;
    char bytes[kBlock];
  };
  Block blocks_[kBlocks];
  uint64_t uses_ = 0;
  SoftMemory memory_;  // not kept across calls: a forked child reads its own memory

 public:
  // `process`: 0 for this process, or a forked child of it.
  explicit BasicSoftReader(pid_t process = 0) : memory_(process) {}
};
using SoftReader = BasicSoftReader<512, 8>;
using PageReader = BasicSoftReader<4096, 4>;

template <class Reader>
bool is_code(const Runtime& runtime, const char* code, Reader& reader) {
  const void* type = nullptr;
  return plausible(code) && reader.get(code, runtime.layout.object_type, type) && type == runtime.code_type;
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

// The cookie, the version and free_threaded lead _Py_DebugOffsets in 3.13 and later releases.
constexpr const DebugPositions& kDebugHeader = kLayouts[std::size(kLayouts) - 1].debug;

// _PyRuntime of 3.13+ when it starts with _Py_DebugOffsets of this version, else null.
const char* debug_offsets(int minor) {
  const auto* runtime = static_cast<const char*>(symbol("_PyRuntime"));
  if (!runtime || std::memcmp(runtime, "xdebugpy", 8) != 0) return nullptr;
  const uint64_t major_minor = 0x03u << 8 | static_cast<unsigned>(minor);
  return load<uint64_t>(runtime, kDebugHeader.version) >> 16 == major_minor ? runtime : nullptr;
}

// A free-threaded build (3.13t and later) says so in _Py_DebugOffsets; its objects and frames
// are laid out differently and its threads run truly in parallel: not read.
bool free_threaded(int minor) {
  const char* runtime = minor >= 13 ? debug_offsets(minor) : nullptr;
  return runtime && load<uint64_t>(runtime, kDebugHeader.free_threaded) != 0;
}

// Fills the fields 3.13 publishes from its _Py_DebugOffsets, after checking that it is one.
bool read_debug_offsets(Layout& layout) {
  const char* runtime = debug_offsets(layout.minor);
  const DebugPositions& at = layout.debug;
  if (!runtime || load<uint64_t>(runtime, at.free_threaded) != 0) return false;
  bool sane = true;
  // Offsets into objects of a few hundred bytes; PyInterpreterState's thread list lies further in.
  const auto read = [&](int32_t position, int32_t& field, uint64_t bound = 4096) {
    const auto value = load<uint64_t>(runtime, position);
    sane = sane && value < bound;
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
  read(at.code_linetable, layout.code_linetable);
  read(at.code_adaptive, layout.code_adaptive);
  read(at.object_type, layout.object_type);
  read(at.unicode_state, layout.unicode_state);
  read(at.unicode_length, layout.unicode_length);
  read(at.unicode_ascii_size, layout.unicode_ascii_size);
  read(at.tstate_thread_id, layout.tstate_thread_id);
  read(at.tstate_native_thread_id, layout.tstate_native_thread_id);
  read(at.interp_threads_head, layout.interp_threads_head, 1 << 20);
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

uint32_t resolve(Runtime& runtime) {
  runtime.thread_state = reinterpret_cast<GetThreadState>(symbol("PyGILState_GetThisThreadState"));
  runtime.code_type = symbol("PyCode_Type");
  runtime.unicode_type = symbol("PyUnicode_Type");
  runtime.bytes_type = symbol("PyBytes_Type");
  runtime.addr2line = reinterpret_cast<Addr2Line>(symbol("PyCode_Addr2Line"));
  runtime.thread_head = reinterpret_cast<ThreadHead>(symbol("PyInterpreterState_ThreadHead"));
  runtime.main_interpreter = reinterpret_cast<MainInterpreter>(symbol("PyInterpreterState_Main"));
  const int minor = python_minor();
  if (!runtime.thread_state || !runtime.code_type || !runtime.unicode_type || minor < 0)
    return python_stacks_word(PythonStacks::NoPython, 0);
  if (free_threaded(minor)) return python_stacks_word(PythonStacks::FreeThreaded, minor);
  // 3.14+ keeps tagged references in its frames and reshaped _Py_DebugOffsets: left alone.
  const Layout* layout = nullptr;
  for (const Layout& candidate : kLayouts) {
    if (candidate.minor == minor) layout = &candidate;
  }
  const uint32_t unsupported = python_stacks_word(PythonStacks::UnsupportedVersion, minor);
  if (!layout) return unsupported;
  runtime.layout = *layout;
  if (layout->from_debug_offsets && !read_debug_offsets(runtime.layout)) return unsupported;
  if (!sizes_agree(runtime)) return unsupported;
  runtime.version[0] = '3';
  runtime.version[1] = '.';
  runtime.version[2] = static_cast<char>('0' + minor / 10);
  runtime.version[3] = static_cast<char>('0' + minor % 10);
  return python_stacks_word(PythonStacks::Available, minor);
}

const Runtime* resolved_slow() {
  int state = kUnresolved;
  if (!g_state.compare_exchange_strong(state, kResolving, std::memory_order_acq_rel, std::memory_order_acquire)) {
    return state == kReady ? &g_runtime : nullptr;  // resolved, disabled or being resolved
  }
  const uint32_t status = resolve(g_runtime);
  const bool ready = python_stacks_kind(status) == PythonStacks::Available;
  g_status.store(status, std::memory_order_release);
  g_state.store(ready ? kReady : kDisabled, std::memory_order_release);
  return ready ? &g_runtime : nullptr;
}

inline const Runtime* resolved() {
  if (g_state.load(std::memory_order_acquire) == kReady) [[likely]]
    return &g_runtime;
  return resolved_slow();
}

// Keeps the innermost and the outermost frames of a chain of any depth in `out`: the first
// `inner` frames in place, the last `outer` in a ring behind them, put in order by finish().
class Keeper {
 public:
  Keeper(RawFrame* out, int max)
      : out_(out), max_(max), outer_(max >= 3 * kOuterFrames ? kOuterFrames : max / 3), inner_(max - outer_) {}
  void add(const RawFrame& frame) {
    if (seen_ < inner_) {
      out_[seen_] = frame;
    } else if (outer_ > 0) {
      out_[inner_ + (seen_ - inner_) % outer_] = frame;
    }
    ++seen_;
  }
  int seen() const { return seen_; }
  // `whole`: the walk reached the outermost frame. When it did not (kMaxWalk), the last frames it
  // saw are not the outermost ones and are dropped.
  Capture finish(bool whole) {
    if (seen_ <= max_) return {seen_, 0, false};
    if (!whole) return {inner_, seen_ - inner_, false};
    if (outer_ > 0) std::rotate(out_ + inner_, out_ + inner_ + (seen_ - inner_) % outer_, out_ + max_);
    return {max_, seen_ - max_, false};
  }

 private:
  RawFrame* out_;
  int max_, outer_, inner_;
  int seen_ = 0;
};

// The first frame of a thread's chain (the thread state's frame, or 3.11/3.12's cframe's).
template <class Reader>
const char* first_frame(const Layout& l, const char* tstate, Reader& reader) {
  const char* frame = nullptr;
  if (!reader.get(tstate, l.tstate_frame, frame)) return nullptr;
  if (l.cframe_current >= 0 && (!plausible(frame) || !reader.get(frame, l.cframe_current, frame))) return nullptr;
  return frame;
}

enum class WalkEnd {
  Whole,   // reached the end of the chain
  Cut,     // `visit` answered false, or kMaxWalk frames were walked
  Failed,  // a read failed (only soft reads fail), or the chain ended in a frame not running
};

// 3.10's PyFrameObject.f_state values of a frame that is running: the outermost frame of a thread's
// chain is always one of them, while a freed frame (RETURNED, RAISED, CLEARED) is not.
constexpr signed char kFrameExecuting = 0, kFrameUnwinding = 2;

// Calls visit(RawFrame) for each frame, innermost first, while it answers true.
// 3.10: the PyFrameObject chain; f_lasti counts code units, -1 before the first instruction.
// 3.11+: the _PyInterpreterFrame chain, skipping what CPython's own tracebacks skip: frames the C
// stack owns (entry frames, 3.12+) and frames still before their first traceable instruction.
template <class Reader, class Visit>
WalkEnd walk(const Runtime& runtime, const char* tstate, Reader& reader, Visit&& visit) {
  const Layout& l = runtime.layout;
  const char* frame = first_frame(l, tstate, reader);
  for (int walked = 0; plausible(frame); ++walked) {
    const char* code = nullptr;
    if (walked == kMaxWalk) return WalkEnd::Cut;
    if (!reader.get(frame, l.frame_code, code)) return WalkEnd::Failed;
    if (l.frame_objects) {
      int32_t lasti = 0;
      if (!reader.get(frame, l.frame_instr, lasti)) return WalkEnd::Failed;
      if (is_code(runtime, code, reader) && !visit(RawFrame{code, lasti >= 0 && lasti < (1 << 30) ? lasti * 2 : -1}))
        return WalkEnd::Cut;
    } else {
      unsigned char owner = 0;
      const char* instr = nullptr;
      int32_t first_traceable = 0;
      if (!reader.get(frame, l.frame_owner, owner) || !reader.get(frame, l.frame_instr, instr)) return WalkEnd::Failed;
      if (owner != l.owner_cstack && is_code(runtime, code, reader) &&
          reader.get(code, l.code_firsttraceable, first_traceable)) {
        // Byte offset from _PyCode_CODE(code): prev_instr (3.11, 3.12) or instr_ptr (3.13), as
        // CPython's _PyInterpreterFrame_LASTI computes it, so the line is the one f_lineno reports.
        const int64_t offset = static_cast<int64_t>(reinterpret_cast<uintptr_t>(instr) -
                                                    reinterpret_cast<uintptr_t>(code + l.code_adaptive));
        const int64_t traceable = int64_t{first_traceable} * 2;
        if ((owner == l.owner_generator || offset >= traceable) && offset >= 0 && offset < INT32_MAX &&
            !visit(RawFrame{code, static_cast<int32_t>(offset)}))
          return WalkEnd::Cut;
      }
    }
    const char* caller = nullptr;
    if (!reader.get(frame, l.frame_previous, caller)) return WalkEnd::Failed;
    // 3.10 links freed frames into its free list through f_back, ending in NULL: a walk that crossed
    // a return into a frame just freed would otherwise end "whole", in stale frames of the free list
    // (the chain's real outermost frames missing).
    signed char state = kFrameExecuting;
    if (!plausible(caller) && l.frame_state >= 0 &&
        (!reader.get(frame, l.frame_state, state) || (state != kFrameExecuting && state != kFrameUnwinding)))
      return WalkEnd::Failed;
    frame = caller;
  }
  return WalkEnd::Whole;
}

// The head of a thread's chain: its innermost frame, that frame's code and its caller. Another
// thread's chain read twice with the same head was not left between the reads: its outer frames
// cannot change while an inner one lives. The innermost frame's instruction may move on meanwhile
// (a thread running Python holds it): only its line is then of a moment during the walk.
struct Top {
  const char* frame = nullptr;
  const char* code = nullptr;
  const char* previous = nullptr;
  bool operator==(const Top&) const = default;
};

template <class Reader>
bool read_top(const Layout& l, const char* tstate, Reader& reader, Top& top) {
  top = {};
  const char* frame = nullptr;
  if (!reader.get(tstate, l.tstate_frame, frame)) return false;
  if (l.cframe_current >= 0) {
    if (!plausible(frame)) return true;  // no C frame: no Python frames
    if (!reader.get(frame, l.cframe_current, frame)) return false;
  }
  top.frame = frame;
  if (!plausible(frame)) return true;
  return reader.get(frame, l.frame_code, top.code) && reader.get(frame, l.frame_previous, top.previous);
}

// What a walk saw of a chain: how many frames, and a digest of their code objects and instructions
// (the innermost one's instruction left out: a running thread moves it while it keeps its frame).
struct ChainShape {
  int frames = 0;
  uint64_t digest = 0;
  void add(const RawFrame& frame) {
    const uint64_t offset = frames == 0 ? 0 : uint64_t(uint32_t(frame.offset));
    digest =
        (digest ^ (reinterpret_cast<uintptr_t>(frame.code) + offset * 0x9e3779b97f4a7c15ULL)) * 0xff51afd7ed558ccdULL;
    ++frames;
  }
  bool operator==(const ChainShape&) const = default;
};

// The thread state of the thread whose pthread_t is `thread_id` (0: not known), read softly from
// the main interpreter's list of thread states (PyInterpreterState_Main's pointer, which is
// CPython's static _PyRuntime's, is the only thing asked of CPython). The main thread's, when not
// found by its id, is the last in the list (the oldest: new thread states are pushed at its head),
// confirmed on 3.11+ by its kernel id. `failed`: a read failed (the list changed under the reads).
template <class Reader>
const char* thread_state_of(const Runtime& runtime, uint64_t thread_id, bool main_thread, Reader& reader,
                            bool& failed) {
  const Layout& l = runtime.layout;
  const auto* interp = static_cast<const char*>(runtime.main_interpreter());
  const char* tstate = nullptr;
  if (!plausible(interp)) return nullptr;
  if (!reader.get(interp, l.interp_threads_head, tstate)) {
    failed = true;
    return nullptr;
  }
  const char* last = nullptr;
  for (int visited = 0; visited < kMaxThreads && plausible(tstate); ++visited) {
    uint64_t id = 0;
    if (!reader.get(tstate, l.tstate_thread_id, id)) {
      failed = true;
      return nullptr;
    }
    if (thread_id != 0 && id == thread_id) return tstate;
    last = tstate;
    if (!reader.get(tstate, kThreadStateNext, tstate)) {
      failed = true;
      return nullptr;
    }
  }
  if (!main_thread || !last) return nullptr;
  if (l.tstate_native_thread_id >= 0) {
    uint64_t native = 0;
    if (!reader.get(last, l.tstate_native_thread_id, native)) {
      failed = true;
      return nullptr;
    }
    if (native != static_cast<uint64_t>(reader.process())) return nullptr;
  }
  return last;
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

// Where a compact str keeps its characters, and how wide they are (1, 2, 4); false for
// anything else.
struct StrShape {
  const char* data;
  int64_t length;
  unsigned kind;
  bool ascii;
};
template <class Reader>
bool str_shape(const Runtime& runtime, const char* object, Reader& reader, StrShape& out) {
  const Layout& l = runtime.layout;
  const void* type = nullptr;
  uint32_t state = 0;
  if (!plausible(object) || !reader.get(object, l.object_type, type) || type != runtime.unicode_type ||
      !reader.get(object, l.unicode_length, out.length) || !reader.get(object, l.unicode_state, state))
    return false;
  out.kind = state >> l.kind_shift & 7;
  out.ascii = (state >> l.ascii_bit & 1) != 0;
  if (out.length < 0 || out.length >= kMaxString || !(state >> l.compact_bit & 1)) return false;
  if ((out.kind != 1 && out.kind != 2 && out.kind != 4) || (out.ascii && out.kind != 1)) return false;
  out.data = object + (out.ascii ? l.unicode_ascii_size : l.unicode_compact_size);
  return true;
}

// A compact str (what the compiler and unmarshal create) as UTF-8; false for anything else.
template <class Reader>
bool read_unicode(const Runtime& runtime, const char* object, Reader& reader, std::string& out) {
  StrShape str{};
  if (!str_shape(runtime, object, reader, str)) return false;
  std::string units(static_cast<std::size_t>(str.length * str.kind), '\0');
  if (!reader.copy(units.data(), str.data, units.size())) return false;
  out.clear();
  if (str.ascii) {
    out = std::move(units);
    return true;
  }
  for (int64_t i = 0; i < str.length; ++i) {
    const char* unit = units.data() + i * str.kind;
    const uint32_t c = str.kind == 1   ? load<uint8_t>(unit, 0)
                       : str.kind == 2 ? load<uint16_t>(unit, 0)
                                       : load<uint32_t>(unit, 0);
    append_utf8(out, c);
  }
  return true;
}

// Whether a one-byte str ends with `suffix` (ASCII); without allocating, as hooks must.
bool str_ends_with(const Runtime& runtime, const char* object, SoftReader& reader, std::string_view suffix) {
  StrShape str{};
  char tail[64];
  if (suffix.size() > sizeof tail || !str_shape(runtime, object, reader, str) || str.kind != 1 ||
      str.length < static_cast<int64_t>(suffix.size()))
    return false;
  return reader.copy(tail, str.data + str.length - static_cast<int64_t>(suffix.size()), suffix.size()) &&
         std::string_view(tail, suffix.size()) == suffix;
}

bool str_equals(const Runtime& runtime, const char* object, SoftReader& reader, std::string_view text) {
  StrShape str{};
  return str_shape(runtime, object, reader, str) && str.length == static_cast<int64_t>(text.size()) &&
         str_ends_with(runtime, object, reader, text);
}

// Whether a thread's innermost frame is the call into the autograd engine: torch/autograd/graph.py
// _engine_run_backward (torch >= 2.3, for both backward() and grad()), or torch/autograd/__init__.py
// backward / grad, which called Variable._execution_engine.run_backward themselves before that.
// That thread sits in THPEngine_run_backward, GIL released, until the engine threads finish its
// graph: its chain does not change while they work for it.
bool blocked_in_backward(const Runtime& runtime, const char* tstate, SoftReader& reader) {
  RawFrame innermost{nullptr, 0};
  walk(runtime, tstate, reader, [&](const RawFrame& frame) {
    innermost = frame;
    return false;
  });
  const auto* code = static_cast<const char*>(innermost.code);
  const Layout& l = runtime.layout;
  const char* file = nullptr;
  const char* name = nullptr;
  if (!code || !reader.get(code, l.code_filename, file) || !reader.get(code, l.code_name, name)) return false;
  if (str_equals(runtime, name, reader, "_engine_run_backward"))
    return str_ends_with(runtime, file, reader, "/torch/autograd/graph.py");
  return (str_equals(runtime, name, reader, "backward") || str_equals(runtime, name, reader, "grad")) &&
         str_ends_with(runtime, file, reader, "/torch/autograd/__init__.py");
}

// The thread found alone in backward last time: while it stays there, the engine threads work
// for it and the other threads need not be looked at again (a sync per backward op would
// otherwise read every thread's innermost frame each time).
std::atomic<const char*> g_backward_owner{nullptr};

// The one Python thread, other than `self`, blocked in backward; none when no thread is, or when
// several are (which one `self` works for is unknown).
const char* backward_owner(const Runtime& runtime, const char* self, SoftReader& reader) {
  const char* known = g_backward_owner.load(std::memory_order_relaxed);
  if (known && known != self && blocked_in_backward(runtime, known, reader)) return known;
  const char* interp = nullptr;
  if (!reader.get(self, kThreadStateInterp, interp) || !plausible(interp)) return nullptr;
  const char* owner = nullptr;
  const auto* tstate = static_cast<const char*>(runtime.thread_head(interp));
  for (int visited = 0; visited < kMaxThreads && plausible(tstate); ++visited) {
    if (tstate != self && blocked_in_backward(runtime, tstate, reader)) {
      if (owner) return nullptr;
      owner = tstate;
    }
    if (!reader.get(tstate, kThreadStateNext, tstate)) return nullptr;
  }
  g_backward_owner.store(owner, std::memory_order_relaxed);
  return owner;
}

// The frames of the thread blocked in backward (backward_owner), read softly.
Capture borrow_backward_stack(const Runtime& runtime, const char* self, RawFrame* out, int max) {
  if (!runtime.thread_head) return {};
  SoftReader reader;
  const char* owner = backward_owner(runtime, self, reader);
  if (!owner) return {};
  Keeper keep(out, max);
  const bool whole = walk(runtime, owner, reader, [&](const RawFrame& frame) {
                       keep.add(frame);
                       return true;
                     }) == WalkEnd::Whole;
  Capture borrowed = keep.finish(whole);
  borrowed.borrowed = borrowed.count > 0;
  return borrowed;
}

template <class Reader>
bool describe(const Runtime& runtime, const char* code, Reader& reader, CodeInfo& out) {
  const Layout& l = runtime.layout;
  const char* file = nullptr;
  const char* name = nullptr;
  return is_code(runtime, code, reader) && reader.get(code, l.code_filename, file) &&
         reader.get(code, l.code_name, name) && read_unicode(runtime, file, reader, out.file) &&
         read_unicode(runtime, name, reader, out.function);
}

// 3.10's co_linetable (Objects/lnotab_notes.txt): (bytecode delta, signed line delta) byte pairs,
// a line delta of -128 meaning "no line"; the walk of PyCode_Addr2Line / _PyCode_CheckLineNumber.
int line_in_pairs(std::string_view table, int first, int offset) {
  int end = 0;
  int computed = first;
  for (std::size_t i = 0; i + 1 < table.size(); i += 2) {
    end += static_cast<unsigned char>(table[i]);
    const int delta = static_cast<signed char>(table[i + 1]);
    const int line = delta == -128 ? -1 : (computed += delta);
    if (end > offset) return line;
  }
  return -1;
}

int varint(std::string_view table, std::size_t at) {
  unsigned read = at < table.size() ? static_cast<unsigned char>(table[at++]) : 0;
  unsigned value = read & 63;
  for (unsigned shift = 6; (read & 64) && at < table.size() && shift < 32; shift += 6) {
    read = static_cast<unsigned char>(table[at++]);
    value |= (read & 63) << shift;
  }
  return static_cast<int>(value);
}

// 3.11+'s location table (Objects/locations.md): entries of 1 to 8 code units, each starting with
// a byte that has its top bit set; the walk of PyCode_Addr2Line (codeobject.c advance,
// get_line_delta).
int line_in_locations(std::string_view table, int first, int offset) {
  int end = 0;
  int computed = first;
  for (std::size_t i = 0; i < table.size();) {
    const auto head = static_cast<unsigned char>(table[i]);
    const int code = head >> 3 & 15;
    int delta = 0;
    if (code == 13 || code == 14) {  // no columns, long form: a signed varint line delta follows
      const int raw = varint(table, i + 1);
      delta = raw & 1 ? -(raw >> 1) : raw >> 1;
    } else if (code == 11 || code == 12) {  // one-line forms one and two lines down
      delta = code - 10;
    }
    computed += delta;
    end += ((head & 7) + 1) * 2;
    if (end > offset) return code == 15 ? -1 : computed;
    do ++i;
    while (i < table.size() && !(static_cast<unsigned char>(table[i]) & 0x80));
  }
  return -1;
}

// The line of `offset` from the code object's line table, read softly (no call into CPython,
// which would dereference another thread's objects).
int decoded_line(const Runtime& runtime, const char* code, int32_t offset, SoftReader& reader) {
  const Layout& l = runtime.layout;
  int32_t first = 0;
  if (!is_code(runtime, code, reader) || !reader.get(code, l.code_firstlineno, first)) return 0;
  if (offset < 0) return first;
  const char* table = nullptr;
  const void* type = nullptr;
  int64_t size = 0;
  if (!reader.get(code, l.code_linetable, table) || !plausible(table) || !reader.get(table, l.object_type, type) ||
      type != runtime.bytes_type || !reader.get(table, kBytesSize, size) || size < 0 || size > kMaxLineTable)
    return first;
  std::string bytes(static_cast<std::size_t>(size), '\0');
  if (!reader.copy(bytes.data(), table + kBytesData, bytes.size())) return first;
  return l.frame_objects ? line_in_pairs(bytes, first, offset) : line_in_locations(bytes, first, offset);
}

}  // namespace

Capture capture(RawFrame* out, int max) {
  const Runtime* runtime = resolved();
  if (!runtime || max <= 0) return {};
  const auto* tstate = static_cast<const char*>(runtime->thread_state());
  if (!plausible(tstate)) return {};
  DirectReader reader;
  Keeper keep(out, max);
  const bool whole = walk(*runtime, tstate, reader, [&](const RawFrame& frame) {
                       keep.add(frame);
                       return true;
                     }) == WalkEnd::Whole;
  return keep.seen() > 0 ? keep.finish(whole) : borrow_backward_stack(*runtime, tstate, out, max);
}

Capture capture_thread(uint64_t thread_id, bool main_thread, ThreadHint& hint, RawFrame* out, int max, bool& torn,
                       bool (*stayed_asleep)(void*), void* context, pid_t process) {
  torn = false;
  const Runtime* runtime = resolved();
  if (!runtime || !runtime->main_interpreter || max <= 0) return {};
  PageReader reader(process);
  // The thread state found last time, if it still holds the thread id it held then: a thread's
  // state lives as long as the thread (a new thread reusing both the memory and the pthread_t is
  // that thread's successor, rightly sampled under the same registration).
  const auto* tstate = static_cast<const char*>(hint.tstate);
  uint64_t id = 0;
  if (!tstate || !reader.get(tstate, runtime->layout.tstate_thread_id, id) || id != hint.thread_id ||
      (thread_id != 0 && id != thread_id)) {
    bool failed = false;
    tstate = thread_state_of(*runtime, thread_id, main_thread, reader, failed);
    hint = {};
    if (!tstate) {
      torn = failed;
      return {};
    }
    if (!reader.get(tstate, runtime->layout.tstate_thread_id, id)) {
      torn = true;
      return {};
    }
    hint = {tstate, id};
  }
  // The chain is walked twice, each walk starting from a head read through its own reader's blocks
  // (so from the head that reader saw): the head must be the same, and so must every frame's code
  // and instruction but the innermost one's. A thread that returned and called again between the
  // walks (a loop, a recursion: the same frames at the same addresses, CPython reuses them) leaves
  // the head as it was, but a walk that crossed the change followed frames being reused.
  Top first_top, second_top;
  ChainShape first_shape, second_shape;
  if (!read_top(runtime->layout, tstate, reader, first_top)) {
    torn = true;
    return {};
  }
  Keeper keep(out, max);
  const WalkEnd end = walk(*runtime, tstate, reader, [&](const RawFrame& frame) {
    keep.add(frame);
    first_shape.add(frame);
    return true;
  });
  // A chain longer than kMaxWalk is taken for a loop made of frames being reused.
  if (end != WalkEnd::Whole) {
    torn = true;
    return {};
  }
  // A thread that did not run while it was walked left its frames as they were.
  if (stayed_asleep && stayed_asleep(context)) return keep.finish(true);
  PageReader again(process);
  if (!read_top(runtime->layout, tstate, again, second_top) || !(first_top == second_top) ||
      walk(*runtime, tstate, again,
           [&](const RawFrame& frame) {
             second_shape.add(frame);
             return true;
           }) != end ||
      !(first_shape == second_shape)) {
    torn = true;
    return {};
  }
  return keep.finish(true);
}

bool describe_code(const void* code, bool borrowed, CodeInfo& out) {
  const Runtime* runtime = resolved();
  if (!runtime) return false;
  const auto* object = static_cast<const char*>(code);
  if (borrowed) {
    SoftReader reader;
    return describe(*runtime, object, reader, out);
  }
  DirectReader reader;
  return describe(*runtime, object, reader, out);
}

int line_of(const void* code, int32_t offset, bool borrowed) {
  const Runtime* runtime = resolved();
  if (!runtime) return 0;
  const auto* object = static_cast<const char*>(code);
  if (borrowed) {
    SoftReader reader;
    return decoded_line(*runtime, object, offset, reader);
  }
  DirectReader direct;
  if (!is_code(*runtime, object, direct)) return 0;
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

uint32_t stacks_status() {
  resolved();
  return g_status.load(std::memory_order_acquire);
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
  add("code.linetable", l.code_linetable);
  add("code.firsttraceable", l.code_firsttraceable);
  add("code.adaptive", l.code_adaptive);
  add("bytes.size", kBytesSize);
  add("bytes.data", kBytesData);
  add("unicode.length", l.unicode_length);
  add("unicode.state", l.unicode_state);
  add("unicode.ascii_size", l.unicode_ascii_size);
  add("unicode.compact_size", l.unicode_compact_size);
  add("unicode.kind_shift", l.kind_shift);
  add("unicode.compact_bit", l.compact_bit);
  add("unicode.ascii_bit", l.ascii_bit);
  add("tstate.next", kThreadStateNext);
  add("tstate.interp", kThreadStateInterp);
  add("tstate.frame", l.tstate_frame);
  add("tstate.thread_id", l.tstate_thread_id);
  add("tstate.native_thread_id", l.tstate_native_thread_id);
  add("interp.threads_head", l.interp_threads_head);
  add("cframe.current_frame", l.cframe_current);
  add("frame.previous", l.frame_previous);
  add("frame.code", l.frame_code);
  add("frame.instr", l.frame_instr);
  add("frame.state", l.frame_state);
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
    add("debug.code_object.linetable", d.code_linetable);
    add("debug.code_object.co_code_adaptive", d.code_adaptive);
    add("debug.pyobject.ob_type", d.object_type);
    add("debug.unicode_object.state", d.unicode_state);
    add("debug.unicode_object.length", d.unicode_length);
    add("debug.unicode_object.asciiobject_size", d.unicode_ascii_size);
    add("debug.thread_state.thread_id", d.tstate_thread_id);
    add("debug.thread_state.native_thread_id", d.tstate_native_thread_id);
    add("debug.interpreter_state.threads_head", d.interp_threads_head);
  }
  return report;
}

}  // namespace trainshim::shim::python
