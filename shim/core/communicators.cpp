#include "communicators.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "resolve.hpp"
#include "soft_read.hpp"

namespace trainshim::shim {

namespace {

struct Entry {
  std::atomic<uint64_t> handle;
  std::atomic<uint64_t> id;
  std::atomic<uint32_t> size;
  std::atomic<uint32_t> rank;
  std::atomic<uint32_t> sequence;
  std::atomic<uint32_t> splits;
  std::atomic<uint32_t> shrinks;
  std::atomic<uint32_t> exchanges;
  std::atomic<uint64_t> group;  // the group the last sequence number was taken in, 0: none
};

constexpr std::size_t kCapacity = 512;
Entry g_entries[kCapacity];
std::atomic<uint64_t> g_next_group{1};

// Point-to-point counters, by a hash of (communicator id, peer, direction); never 0.
struct PeerCounter {
  std::atomic<uint64_t> key;
  std::atomic<uint32_t> count;
};
constexpr std::size_t kPeerCapacity = 1u << 14;
PeerCounter g_peers[kPeerCapacity];

struct Pending {
  std::atomic<void* const*> slot;  // where NCCL writes the child's handle
  std::atomic<uint64_t> id;
};
constexpr std::size_t kPendingCapacity = 32;
Pending g_pending[kPendingCapacity];

// The numbers taken in the current outermost group, to give back if it launches nothing.
struct Taken {
  uint64_t handle;
  uint64_t peer_key;  // 0: a collective number
};
constexpr std::size_t kTakenCapacity = 256;

struct GroupState {
  uint32_t depth;
  uint64_t current;
  uint32_t taken_count;
  Taken taken[kTakenCapacity];
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

// Its outputs are communicator ids, which every rank computes in its own process and the
// collector matches across ranks: its exact arithmetic is part of the format, kept apart from
// the in-process hashes (stacks.cpp, the collector's and the CLI's tables), which may change.
uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t h = (a ^ 0x9e3779b97f4a7c15ULL) + b * 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h * 0xc4ceb9fe1a85ec53ULL;
}

CommState local_state(uint64_t handle) { return {mix(handle, 0x6c6f63616cULL), 0, 0}; }

// Reads the handle NCCL wrote into a slot of the program's, failing softly if the slot is gone.
uint64_t read_slot(void* const* slot) {
  void* value = nullptr;
  return soft_read(&value, slot, sizeof value) ? reinterpret_cast<uintptr_t>(value) : 0;
}

// ncclCommCount and ncclCommUserRank fail (ncclInvalidArgument) until the communicator is ready.
bool ask_nccl(uint64_t handle, uint32_t& size, uint32_t& rank) {
  using Query = int (*)(void*, int*);
  static const auto count = reinterpret_cast<Query>(runtime_function(Library::Nccl, "pncclCommCount"));
  static const auto user_rank = reinterpret_cast<Query>(runtime_function(Library::Nccl, "pncclCommUserRank"));
  int n = 0, me = 0;
  auto* comm = reinterpret_cast<void*>(handle);
  if (!count || !user_rank || count(comm, &n) != 0 || user_rank(comm, &me) != 0 || n <= 0 || me < 0 || me >= n)
    return false;
  size = uint32_t(n);
  rank = uint32_t(me);
  return true;
}

bool resolve_pending(uint64_t handle) {
  for (Pending& p : g_pending) {
    void* const* slot = p.slot.load(std::memory_order_acquire);
    if (!slot || read_slot(slot) != handle) continue;
    uint32_t size = 0, rank = 0;
    if (!ask_nccl(handle, size, rank)) return false;
    const uint64_t id = p.id.load(std::memory_order_relaxed);
    if (!p.slot.compare_exchange_strong(slot, nullptr, std::memory_order_acq_rel)) return false;
    comm_created(handle, {id, size, rank});
    return true;
  }
  return false;
}

uint64_t parent_id(Entry* parent, uint64_t parent_handle) {
  return parent ? parent->id.load(std::memory_order_relaxed) : local_state(parent_handle).id;
}

void take(uint64_t handle, uint64_t peer_key) {
  GroupState& g = group_state();
  if (g.depth > 0 && g.taken_count < kTakenCapacity) g.taken[g.taken_count++] = {handle, peer_key};
}

PeerCounter* peer_counter(uint64_t key, bool create) {
  for (std::size_t i = 0, slot = key & (kPeerCapacity - 1); i < kPeerCapacity;
       ++i, slot = (slot + 1) & (kPeerCapacity - 1)) {
    PeerCounter& c = g_peers[slot];
    uint64_t found = c.key.load(std::memory_order_acquire);
    if (found == key) return &c;
    if (found != 0) continue;
    if (!create) return nullptr;
    if (c.key.compare_exchange_strong(found, key, std::memory_order_acq_rel) || found == key) return &c;
  }
  return nullptr;
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
  e->exchanges.store(0, std::memory_order_relaxed);
  e->splits.store(0, std::memory_order_relaxed);
  e->shrinks.store(0, std::memory_order_relaxed);
  e->group.store(0, std::memory_order_release);
}

void comm_destroyed(uint64_t handle) {
  if (Entry* e = find(handle)) e->handle.store(0, std::memory_order_release);
}

CommState comm_state(uint64_t handle) {
  const Entry* e = find(handle);
  if (!e && handle && resolve_pending(handle)) e = find(handle);
  if (e)
    return {e->id.load(std::memory_order_relaxed), e->size.load(std::memory_order_relaxed),
            e->rank.load(std::memory_order_relaxed)};
  return local_state(handle);
}

uint64_t split_id(uint64_t parent_handle, int color) {
  Entry* parent = find(parent_handle);
  const uint32_t nth = parent ? parent->splits.fetch_add(1, std::memory_order_relaxed) : 0;
  return mix(mix(parent_id(parent, parent_handle), uint64_t(uint32_t(color))), nth);
}

uint64_t shrink_id(uint64_t parent_handle, const int* excluded, int count) {
  Entry* parent = find(parent_handle);
  const uint32_t nth = parent ? parent->shrinks.fetch_add(1, std::memory_order_relaxed) : 0;
  // Order-independent: NCCL sorts the list itself, ranks may pass it in any order.
  uint64_t ranks = 0;
  for (int i = 0; excluded && i < count; ++i) ranks += mix(uint64_t(uint32_t(excluded[i])), 0x736872696e6bULL);
  return mix(mix(mix(parent_id(parent, parent_handle), 0x736872696e6bULL), ranks), nth);
}

void child_pending(void* const* slot, uint64_t id) {
  if (!slot) return;
  for (Pending& p : g_pending) {
    void* const* empty = nullptr;
    if (p.slot.load(std::memory_order_relaxed) == nullptr) {
      p.id.store(id, std::memory_order_relaxed);
      if (p.slot.compare_exchange_strong(empty, slot, std::memory_order_acq_rel)) return;
    }
  }
}

uint32_t next_sequence(uint64_t handle) {
  Entry* e = find(handle);
  if (!e) return 0;
  GroupState& g = group_state();
  if (g.depth > 0) {
    if (e->group.load(std::memory_order_relaxed) == g.current) return e->sequence.load(std::memory_order_relaxed);
    e->group.store(g.current, std::memory_order_relaxed);
    take(handle, 0);
  }
  return e->sequence.fetch_add(1, std::memory_order_relaxed) + 1;
}

uint32_t next_exchange(uint64_t handle) {
  Entry* e = find(handle);
  return e ? e->exchanges.fetch_add(1, std::memory_order_relaxed) + 1 : 0;
}

uint32_t next_p2p_sequence(uint64_t handle, uint32_t peer, bool send) {
  const Entry* e = find(handle);
  if (!e) return 0;
  const uint64_t key = mix(e->id.load(std::memory_order_relaxed), uint64_t(peer) << 1 | (send ? 1 : 0)) | 1;
  PeerCounter* c = peer_counter(key, true);
  if (!c) return 0;  // the table is full: left unnumbered, as an unregistered communicator's
  take(handle, key);
  return c->count.fetch_add(1, std::memory_order_relaxed) + 1;
}

void group_started() {
  GroupState& g = group_state();
  if (g.depth++ == 0) {
    g.current = g_next_group.fetch_add(1, std::memory_order_relaxed);
    g.taken_count = 0;
  }
}

bool group_ended() {
  GroupState& g = group_state();
  if (g.depth == 0) return false;
  return --g.depth == 0;
}

bool in_group() { return group_state().depth > 0; }

void forget_group_numbers() {
  GroupState& g = group_state();
  for (uint32_t i = 0; i < g.taken_count; ++i) {
    const Taken& t = g.taken[i];
    if (t.peer_key) {
      if (PeerCounter* c = peer_counter(t.peer_key, false)) c->count.fetch_sub(1, std::memory_order_relaxed);
    } else if (Entry* e = find(t.handle)) {
      e->sequence.fetch_sub(1, std::memory_order_relaxed);
      e->group.store(0, std::memory_order_relaxed);
    }
  }
  g.taken_count = 0;
}

void reset_communicators_after_fork() {
  // NCCL communicators do not survive fork(): the child has none.
  for (Entry& e : g_entries) e.handle.store(0, std::memory_order_relaxed);
  for (Pending& p : g_pending) p.slot.store(nullptr, std::memory_order_relaxed);
  for (PeerCounter& c : g_peers) {
    c.key.store(0, std::memory_order_relaxed);
    c.count.store(0, std::memory_order_relaxed);
  }
  group_state() = {};
}

}  // namespace trainshim::shim
