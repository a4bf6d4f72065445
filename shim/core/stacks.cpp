#include "stacks.hpp"

#include <elf.h>
#include <libunwind.h>
#include <link.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "id_table.hpp"
#include "lazy_global.hpp"
#include "python_stack.hpp"
#include "trainshim/ring.hpp"

namespace trainshim::shim {

namespace {

IdTable g_native_stacks{1};
// The hooks' Python stacks and the sampler's, in one id space but apart: a thread running Python
// shows the sampler a new innermost instruction at most ticks, and those stacks must not fill the
// table the hooks' sites (syncs, copies, collectives) are named from.
IdTable g_python_stacks{1};
IdTable g_sampled_python_stacks{1 + IdTable::kCapacity};

// Keys of this process's stack tables only, never stored: unlike the communicator ids
// (communicators.cpp), its output may change freely.
inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdULL;
}

// What is published on the slow path: modules, Python names. Only new stacks take this lock.
struct SlowPath {
  std::mutex lock;
  std::unordered_set<std::string> modules;  // "path@base" already published
  unsigned long long loads_seen = ~0ULL;
  std::unordered_map<std::string, uint32_t> strings;
  uint32_t next_string = 1;
  std::unordered_map<const void*, std::pair<uint32_t, uint32_t>> code_names;  // file, function
};

// Created on the first new stack, not at load: the shim does nothing in a process that makes no
// CUDA call.
LazyGlobal<SlowPath> g_slow;

// The text range of this library: its own frames are not the caller's.
struct OwnRange {
  uintptr_t begin = 0, end = 0;
};

OwnRange own_range() {
  static const OwnRange range = [] {
    OwnRange r;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
          auto* out = static_cast<OwnRange*>(data);
          const auto here = reinterpret_cast<uintptr_t>(&own_range);
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
            const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
            if (here >= begin && here < begin + ph.p_memsz) {
              *out = {begin, begin + ph.p_memsz};
              return 1;
            }
          }
          return 0;
        },
        &r);
    return r;
  }();
  return range;
}

bool publish(SegmentHeader* header, SideRecord& record) { return side_ring_of(header).push(record); }

std::string build_id_of(const dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    auto* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + ((note->n_namesz + 3) & ~3u);
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 &&
          desc + note->n_descsz <= end)
        return std::string(desc, note->n_descsz);
      p = desc + ((note->n_descsz + 3) & ~3u);
    }
  }
  return {};
}

struct ModuleScan {
  SegmentHeader* header;
  SlowPath* slow;
  uint32_t next_id;
  bool side_ring_full;
};

// Publishes every loaded module not yet published; cheap when nothing was loaded since the last
// look (dlpi_adds counts every load the process has made).
void publish_new_modules(SegmentHeader* header, SlowPath& slow) {
  unsigned long long loads = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        *static_cast<unsigned long long*>(data) = info->dlpi_adds;
        return 1;
      },
      &loads);
  if (loads == slow.loads_seen) return;
  ModuleScan scan{header, &slow, uint32_t(slow.modules.size() + 1), false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<ModuleScan*>(data);
        std::string path = info->dlpi_name ? info->dlpi_name : "";
        if (path.empty()) {
          char exe[4096];
          const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
          if (n <= 0) return 0;
          path.assign(exe, size_t(n));
        }
        if (path.find("linux-vdso") != std::string::npos) return 0;
        const std::string key = path + "@" + std::to_string(info->dlpi_addr);
        if (s->slow->modules.count(key)) return 0;
        SideRecord r{};
        r.kind = static_cast<uint16_t>(SideKind::Module);
        r.id = s->next_id;
        r.value = info->dlpi_addr;
        const std::string id = build_id_of(info);
        r.count = uint16_t(std::min<size_t>(id.size(), kMaxBuildIdBytes));
        std::memcpy(r.text, id.data(), r.count);
        std::strncpy(r.text + kModulePathOffset, path.c_str(), kSideTextBytes - kModulePathOffset - 1);
        if (!publish(s->header, r)) {
          s->side_ring_full = true;  // tried again with the next new stack
          return 1;
        }
        s->slow->modules.insert(key);
        ++s->next_id;
        return 0;
      },
      &scan);
  if (!scan.side_ring_full) slow.loads_seen = loads;
}

uint32_t intern(SegmentHeader* header, SlowPath& slow, const std::string& text) {
  auto it = slow.strings.find(text);
  if (it != slow.strings.end()) return it->second;
  SideRecord r{};
  r.kind = static_cast<uint16_t>(SideKind::String);
  r.id = slow.next_string;
  r.count = uint16_t(std::min<size_t>(text.size(), kSideTextBytes));
  std::memcpy(r.text, text.data(), r.count);
  if (!publish(header, r)) return 0;
  slow.strings.emplace(text, slow.next_string);
  return slow.next_string++;
}

// The id of the stack with this key. A stack seen for the first time is published first, as the
// side record that `fill` writes (under the slow path's lock; its id is set here).
template <class Fill>
uint32_t stack_id(IdTable& table, SegmentHeader* header, uint64_t key, Fill&& fill) {
  IdTable::Entry* entry = table.find_or_insert(key);
  if (!entry) return 0;
  const uint32_t id = table.id_of(*entry);
  if (entry->published.load(std::memory_order_acquire)) return id;
  SlowPath& slow = g_slow.get();
  std::lock_guard lock(slow.lock);
  if (entry->published.load(std::memory_order_acquire)) return id;  // by the thread that held the lock
  SideRecord r{};
  r.id = id;
  fill(slow, r);
  if (publish(header, r)) entry->published.store(true, std::memory_order_release);
  return id;
}

__attribute__((noinline)) uint32_t native_stack(SegmentHeader* header) {
  uint64_t ips[kMaxNativeFrames + 8];
  const int n = unw_backtrace(reinterpret_cast<void**>(ips), int(kMaxNativeFrames + 8));
  const OwnRange own = own_range();
  int first = 0;
  while (first < n && ips[first] >= own.begin && ips[first] < own.end) ++first;
  const int count = std::min<int>(n - first, kMaxNativeFrames);
  if (count <= 0) return 0;
  uint64_t key = uint64_t(count);
  for (int i = 0; i < count; ++i) key = mix(key, ips[first + i]);
  return stack_id(g_native_stacks, header, key, [&](SlowPath& slow, SideRecord& r) {
    publish_new_modules(header, slow);
    r.kind = static_cast<uint16_t>(SideKind::NativeStack);
    r.count = uint16_t(count);
    std::memcpy(r.native, ips + first, sizeof(uint64_t) * size_t(count));
  });
}

// The id of a captured Python stack. `soft`: the frames are another thread's (borrowed, or read by
// the sampler), their code objects are read softly.
uint32_t python_stack_id(IdTable& table, SegmentHeader* header, const python::RawFrame* frames,
                         const python::Capture& captured, bool soft) {
  const int count = captured.count;
  if (count <= 0) return 0;
  uint64_t key = mix(uint64_t(count) | (1ULL << 63) | (captured.borrowed ? 1ULL << 62 : 0), uint64_t(captured.omitted));
  for (int i = 0; i < count; ++i)
    key = mix(mix(key, reinterpret_cast<uintptr_t>(frames[i].code)), uint64_t(uint32_t(frames[i].offset)));
  return stack_id(table, header, key, [&](SlowPath& slow, SideRecord& r) {
    r.kind = static_cast<uint16_t>(SideKind::PythonStack);
    r.count = uint16_t(count);
    r.value = (captured.borrowed ? kPythonStackBorrowed : 0) | uint64_t(uint32_t(captured.omitted)) << 32;
    for (int i = 0; i < count; ++i) {
      auto [cached, fresh] = slow.code_names.try_emplace(frames[i].code, 0u, 0u);
      if (fresh || !cached->second.first) {
        python::CodeInfo info;
        if (python::describe_code(frames[i].code, soft, info))
          cached->second = {intern(header, slow, info.file), intern(header, slow, info.function)};
      }
      r.python[i] = {cached->second.first, cached->second.second,
                     python::line_of(frames[i].code, frames[i].offset, soft), 0};
    }
  });
}

uint32_t python_stack(SegmentHeader* header) {
  python::RawFrame frames[kMaxPythonFrames];
  const python::Capture captured = python::capture(frames, int(kMaxPythonFrames));
  return python_stack_id(g_python_stacks, header, frames, captured, captured.borrowed);
}

}  // namespace

StackIds capture_stacks(SegmentHeader* header) {
  const StackIds ids{native_stack(header), python_stack(header)};
  // Known once the first Python stack was looked for; tells the report why stacks are missing.
  if (header->python_stacks.load(std::memory_order_relaxed) == 0)
    header->python_stacks.store(python::stacks_status(), std::memory_order_relaxed);
  return ids;
}

uint32_t sampled_python_stack(SegmentHeader* header, const python::RawFrame* frames, const python::Capture& captured) {
  const uint32_t id = python_stack_id(g_sampled_python_stacks, header, frames, captured, true);
  if (header->python_stacks.load(std::memory_order_relaxed) == 0)
    header->python_stacks.store(python::stacks_status(), std::memory_order_relaxed);
  return id;
}

uint32_t string_id(SegmentHeader* header, std::string_view text) {
  SlowPath& slow = g_slow.get();
  std::lock_guard lock(slow.lock);
  return intern(header, slow, std::string(text.substr(0, kSideTextBytes)));
}

void reset_stacks_after_fork() {
  g_native_stacks.reset();
  g_python_stacks.reset();
  g_sampled_python_stacks.reset();
  // The parent's lock may have been held at fork(): the child starts with fresh tables (the
  // parent's copy is left, not destroyed, for the same reason).
  g_slow.forget();
}

}  // namespace trainshim::shim
