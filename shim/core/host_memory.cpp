#include "host_memory.hpp"

#include <cuda_runtime_api.h>

#include <atomic>

#include "own_calls.hpp"
#include "pinned_ranges.hpp"
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

using Attributes = cudaError_t (*)(cudaPointerAttributes*, const void*);

Attributes pointer_attributes() {
  static const auto function =
      reinterpret_cast<Attributes>(runtime_function(Library::Cudart, "cudaPointerGetAttributes"));
  return function;
}

HostMemory kind_of(const cudaPointerAttributes& attr) {
  switch (attr.type) {
    case cudaMemoryTypeHost:
      return HostMemory::Pinned;
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged:
      return HostMemory::Device;
    case cudaMemoryTypeUnregistered:
      return HostMemory::Pageable;
  }
  return HostMemory::Unknown;
}

HostMemory ask(OwnCalls& calls, const void* address) {
  cudaPointerAttributes attr{};
  if (calls.check(pointer_attributes()(&attr, address)) != cudaSuccess) return HostMemory::Unknown;
  return kind_of(attr);
}

}  // namespace

RuntimeAnswer ask_runtime(const void* first, const void* second, cudaStream_t stream) {
  if (!pointer_attributes()) return {};
  OwnCalls calls;
  if (!calls.allowed() || calls.capturing(stream)) return {};
  return {ask(calls, first), second ? ask(calls, second) : HostMemory::Unknown};
}

HostMemory classify_host_memory(const void* address, uint64_t bytes, cudaStream_t stream) {
  const auto begin = reinterpret_cast<uintptr_t>(address);
  PinnedRanges& pinned = pinned_ranges();
  // Read before the table: an answer remembered across a change of the table is then stale.
  const uint64_t generation = pinned.generation();
  Remembered& memo = remembered();
  auto answers = [&](const RememberedRange& r) {
    return r.generation == generation && begin >= r.begin && begin < r.end;
  };
  if (answers(memo.ranges[memo.last])) return memo.ranges[memo.last].kind;
  for (unsigned i = 0; i < kRemembered; ++i)
    if (answers(memo.ranges[i])) {
      memo.last = i;
      return memo.ranges[i].kind;
    }
  RememberedRange fresh{begin, begin + (bytes ? bytes : 1), generation, HostMemory::Unknown};
  if (pinned.find(begin, fresh.begin, fresh.end)) fresh.kind = HostMemory::Pinned;
  else fresh.kind = ask_runtime(address, nullptr, stream).first;
  if (fresh.kind != HostMemory::Unknown) {
    memo.last = memo.next++ % kRemembered;
    memo.ranges[memo.last] = fresh;
  }
  return fresh.kind;
}

}  // namespace trainshim::shim
