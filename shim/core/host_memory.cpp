#include "host_memory.hpp"

#include <cuda_runtime_api.h>

#include <atomic>

#include "recorder.hpp"
#include "resolve.hpp"

namespace trainshim::shim {

namespace {

struct RememberedRange {
  uintptr_t begin;
  uintptr_t end;
  uint64_t generation;  // of the pinned table when remembered
  HostMemory kind;
};

constexpr unsigned kRemembered = 16;

struct Remembered {
  RememberedRange ranges[kRemembered];
  unsigned next;
  unsigned last;  // the entry that answered last: a training loop copies from the same buffers
};

Remembered& remembered() {
  static thread_local Remembered r __attribute__((tls_model("initial-exec"))){};
  return r;
}

template <class Fn>
Fn runtime(const char* name) {
  return reinterpret_cast<Fn>(runtime_function(Library::Cudart, name));
}

}  // namespace

HostMemory ask_runtime(const void* address) {
  using Attributes = cudaError_t (*)(cudaPointerAttributes*, const void*);
  using LastError = cudaError_t (*)();
  static std::atomic<Attributes> attributes{nullptr};
  static std::atomic<LastError> peek{nullptr}, get_last{nullptr};
  if (!attributes.load(std::memory_order_acquire)) {
    peek = runtime<LastError>("cudaPeekAtLastError");
    get_last = runtime<LastError>("cudaGetLastError");
    attributes.store(runtime<Attributes>("cudaPointerGetAttributes"), std::memory_order_release);
  }
  const Attributes ask = attributes.load(std::memory_order_acquire);
  if (!ask || !peek.load() || !get_last.load()) return HostMemory::Unknown;
  // The query must not leave an error behind for the application's next cudaGetLastError.
  const bool error_pending = peek.load()() != cudaSuccess;
  cudaPointerAttributes attr{};
  const cudaError_t rc = ask(&attr, address);
  if (rc != cudaSuccess) {
    if (!error_pending) get_last.load()();
    return HostMemory::Unknown;
  }
  switch (attr.type) {
    case cudaMemoryTypeHost: return HostMemory::Pinned;
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged: return HostMemory::Device;
    case cudaMemoryTypeUnregistered: return HostMemory::Pageable;
  }
  return HostMemory::Unknown;
}

HostMemory classify_host_memory(const void* address, uint64_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(address);
  PinnedRanges& pinned = pinned_ranges();
  // Read before the table: an answer remembered across a change of the table is then stale.
  const uint64_t generation = pinned.generation();
  Remembered& memo = remembered();
  auto answers = [&](const RememberedRange& r) { return r.generation == generation && begin >= r.begin && begin < r.end; };
  if (answers(memo.ranges[memo.last])) return memo.ranges[memo.last].kind;
  for (unsigned i = 0; i < kRemembered; ++i)
    if (answers(memo.ranges[i])) {
      memo.last = i;
      return memo.ranges[i].kind;
    }
  RememberedRange fresh{begin, begin + (bytes ? bytes : 1), generation, HostMemory::Unknown};
  if (pinned.find(begin, fresh.begin, fresh.end)) fresh.kind = HostMemory::Pinned;
  else fresh.kind = ask_runtime(address);
  if (fresh.kind != HostMemory::Unknown) {
    memo.last = memo.next++ % kRemembered;
    memo.ranges[memo.last] = fresh;
  }
  return fresh.kind;
}

}  // namespace trainshim::shim
