#pragma once
// The table that gives each distinct stack (by its hash) one id for the life of the process.
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace trainshim::shim {

// Open addressing over a fixed array: lock-free lookups, inserts by compare-exchange on the key.
// An entry's id is its slot's, fixed before any key is written: a thread that finds a key another
// thread has just inserted has its id at once (threads alike, e.g. a batch of workers started
// together, look up the same stack at the same moment). Tables of one id space take disjoint ranges.
class IdTable {
 public:
  static constexpr std::size_t kCapacity = 1 << 14;

  constexpr explicit IdTable(uint32_t first_id) : first_id_(first_id) {}

  struct Entry {
    std::atomic<uint64_t> key;
    std::atomic<bool> published;
  };

  // The entry for `key`, created if absent; nullptr when the table is full.
  Entry* find_or_insert(uint64_t key) {
    if (key == 0) key = 1;
    for (std::size_t probe = 0; probe < 64; ++probe) {
      Entry& e = entries_[(key + probe) & (kCapacity - 1)];
      uint64_t current = e.key.load(std::memory_order_acquire);
      if (current == 0 && e.key.compare_exchange_strong(current, key, std::memory_order_acq_rel)) return &e;
      if (current == key) return &e;
    }
    return nullptr;
  }

  uint32_t id_of(const Entry& entry) const { return first_id_ + uint32_t(&entry - entries_); }

  void reset() {
    for (Entry& e : entries_) {
      e.key.store(0, std::memory_order_relaxed);
      e.published.store(false, std::memory_order_relaxed);
    }
  }

 private:
  Entry entries_[kCapacity]{};
  uint32_t first_id_;
};

}  // namespace trainshim::shim
