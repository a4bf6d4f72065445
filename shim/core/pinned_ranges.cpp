#include "pinned_ranges.hpp"

#include <new>

namespace trainshim::shim {

namespace {
constexpr auto relaxed = std::memory_order_relaxed;

inline void pause() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

std::size_t PinnedRanges::lower_bound(uintptr_t address) const {
  std::size_t lo = 0, hi = count_.load(relaxed);
  if (hi > kCapacity) hi = kCapacity;
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (begins_[mid].load(relaxed) < address) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

bool PinnedRanges::add(uintptr_t begin, uint64_t size) {
  std::lock_guard lock(writer_);
  const std::size_t n = count_.load(relaxed);
  if (n == kCapacity || size == 0) return false;
  const std::size_t at = lower_bound(begin);
  sequence_.fetch_add(1, std::memory_order_acq_rel);  // odd: a change is in progress
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t i = n; i > at; --i) {
    begins_[i].store(begins_[i - 1].load(relaxed), relaxed);
    ends_[i].store(ends_[i - 1].load(relaxed), relaxed);
  }
  begins_[at].store(begin, relaxed);
  ends_[at].store(begin + size, relaxed);
  count_.store(n + 1, relaxed);
  sequence_.fetch_add(1, std::memory_order_release);
  return true;
}

uint64_t PinnedRanges::remove(uintptr_t begin) {
  std::lock_guard lock(writer_);
  const std::size_t n = count_.load(relaxed);
  const std::size_t at = lower_bound(begin);
  if (at == n || begins_[at].load(relaxed) != begin) return 0;
  const uint64_t size = ends_[at].load(relaxed) - begin;
  sequence_.fetch_add(1, std::memory_order_acq_rel);
  std::atomic_thread_fence(std::memory_order_release);
  for (std::size_t i = at; i + 1 < n; ++i) {
    begins_[i].store(begins_[i + 1].load(relaxed), relaxed);
    ends_[i].store(ends_[i + 1].load(relaxed), relaxed);
  }
  count_.store(n - 1, relaxed);
  sequence_.fetch_add(1, std::memory_order_release);
  return size;
}

bool PinnedRanges::contains(uintptr_t address) const {
  uintptr_t begin = 0, end = 0;
  return find(address, begin, end);
}

bool PinnedRanges::find(uintptr_t address, uintptr_t& begin, uintptr_t& end) const {
  // A change takes microseconds; a writer descheduled mid-change must not stall the copy for
  // longer than that: after a bounded wait, answer "not known here" and let the caller ask the
  // runtime.
  for (int attempt = 0; attempt < 1024; ++attempt) {
    const uint64_t before = sequence_.load(std::memory_order_acquire);
    if (before & 1) {
      pause();
      continue;
    }
    const std::size_t at = lower_bound(address + 1);  // first range beginning after address
    const uintptr_t found_begin = at > 0 ? begins_[at - 1].load(relaxed) : 0;
    const uintptr_t found_end = at > 0 ? ends_[at - 1].load(relaxed) : 0;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (sequence_.load(relaxed) != before) continue;
    if (at == 0 || address < found_begin || address >= found_end) return false;
    begin = found_begin;
    end = found_end;
    return true;
  }
  return false;
}

std::size_t PinnedRanges::size() const { return count_.load(relaxed); }

void PinnedRanges::reset_after_fork() {
  // The parent's writer may have held the mutex at fork(): the child's copy is rebuilt, not locked.
  new (&writer_) std::mutex;
  count_.store(0, relaxed);
  sequence_.store((sequence_.load(relaxed) | 1) + 1, std::memory_order_release);
}

namespace {
// Constant-initialised: no constructor runs, whenever the first hooked call comes.
constinit PinnedRanges g_pinned;
}  // namespace

PinnedRanges& pinned_ranges() { return g_pinned; }

}  // namespace trainshim::shim
