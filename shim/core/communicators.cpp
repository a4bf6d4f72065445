#include "communicators.hpp"

#include <atomic>

namespace trainshim::shim {

namespace {

struct Entry {
  std::atomic<uint64_t> handle;
  std::atomic<uint64_t> id;
  std::atomic<uint32_t> size;
  std::atomic<uint32_t> rank;
  std::atomic<uint32_t> sequence;
  std::atomic<uint32_t> splits;
  std::atomic<uint64_t> group;  // the group the last sequence number was taken in, 0: none
};

constexpr std::size_t kCapacity = 512;
Entry g_entries[kCapacity];
std::atomic<uint64_t> g_next_group{1};

struct GroupState {
  uint32_t depth;
  uint64_t current;
};

GroupState& group_state() {
  static thread_local GroupState state __attribute__((tls_model("initial-exec"))){};
  return state;
}

Entry* find(uint64_t handle) {
  if (!handle) return nullptr;
  for (Entry& e : g_entries)
    if (e.handle.load(std::memory_order_acquire) == handle) return &e;
  return nullptr;
}

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t h = (a ^ 0x9e3779b97f4a7c15ULL) + b * 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h * 0xc4ceb9fe1a85ec53ULL;
}

}  // namespace

void comm_created(uint64_t handle, const CommState& state) {
  if (!handle) return;
  Entry* e = find(handle);
  for (std::size_t i = 0; !e && i < kCapacity; ++i) {
    uint64_t empty = 0;
    if (g_entries[i].handle.compare_exchange_strong(empty, handle, std::memory_order_acq_rel)) e = &g_entries[i];
  }
  if (!e) return;  // more live communicators than the table holds: the rest stay unmatched
  e->id.store(state.id, std::memory_order_relaxed);
  e->size.store(state.size, std::memory_order_relaxed);
  e->rank.store(state.rank, std::memory_order_relaxed);
  e->sequence.store(0, std::memory_order_relaxed);
  e->splits.store(0, std::memory_order_relaxed);
  e->group.store(0, std::memory_order_release);
}

void comm_destroyed(uint64_t handle) {
  if (Entry* e = find(handle)) e->handle.store(0, std::memory_order_release);
}

CommState comm_state(uint64_t handle) {
  if (const Entry* e = find(handle))
    return {e->id.load(std::memory_order_relaxed), e->size.load(std::memory_order_relaxed),
            e->rank.load(std::memory_order_relaxed)};
  return {mix(handle, 0x6c6f63616cULL), 0, 0};
}

uint64_t split_id(uint64_t parent_handle, int color) {
  Entry* parent = find(parent_handle);
  const uint64_t parent_id = parent ? parent->id.load(std::memory_order_relaxed) : comm_state(parent_handle).id;
  const uint32_t nth = parent ? parent->splits.fetch_add(1, std::memory_order_relaxed) : 0;
  return mix(mix(parent_id, uint64_t(uint32_t(color))), nth);
}

uint32_t next_sequence(uint64_t handle) {
  Entry* e = find(handle);
  if (!e) return 0;
  const GroupState& g = group_state();
  if (g.depth > 0) {
    if (e->group.load(std::memory_order_relaxed) == g.current) return e->sequence.load(std::memory_order_relaxed);
    e->group.store(g.current, std::memory_order_relaxed);
  }
  return e->sequence.fetch_add(1, std::memory_order_relaxed) + 1;
}

void group_started() {
  GroupState& g = group_state();
  if (g.depth++ == 0) g.current = g_next_group.fetch_add(1, std::memory_order_relaxed);
}

void group_ended() {
  GroupState& g = group_state();
  if (g.depth > 0) --g.depth;
}

void reset_communicators_after_fork() {
  // NCCL communicators do not survive fork(): the child has none.
  for (Entry& e : g_entries) e.handle.store(0, std::memory_order_relaxed);
  group_state() = {};
}

}  // namespace trainshim::shim
