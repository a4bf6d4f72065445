#pragma once
// The page-locked host ranges this process has allocated or registered through the runtime.
// Readers (every copy) never take a lock: a sequence lock lets them retry the rare read that
// overlapped a change. Writers (cudaHostAlloc & co., never on a hot loop) serialize on a mutex.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace trainshim::shim {

class PinnedRanges {
 public:
  static constexpr std::size_t kCapacity = 8192;

  // False when the table is full: the range is then classified by asking the runtime.
  bool add(uintptr_t begin, uint64_t size);
  // Returns the size of the range that began at `begin`, 0 if none did.
  uint64_t remove(uintptr_t begin);
  bool contains(uintptr_t address) const;
  // The range holding `address`, if any.
  bool find(uintptr_t address, uintptr_t& begin, uintptr_t& end) const;
  std::size_t size() const;
  // Bumped on every change: remembered answers about host memory older than this are stale.
  uint64_t generation() const { return sequence_.load(std::memory_order_acquire); }
  // Only in a forked child, which has one thread.
  void reset_after_fork();

 private:
  std::size_t lower_bound(uintptr_t address) const;

  mutable std::mutex writer_;
  std::atomic<uint64_t> sequence_{0};
  std::atomic<std::size_t> count_{0};
  std::atomic<uintptr_t> begins_[kCapacity]{};
  std::atomic<uintptr_t> ends_[kCapacity]{};
};

// The process's table, filled by the pinned-memory hooks and read by every copy.
PinnedRanges& pinned_ranges();

}  // namespace trainshim::shim
