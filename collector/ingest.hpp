#pragma once
// What the collector keeps of one process's records, built record by record as they are drained
// and handed to the database once per pass: the exact aggregates per call key (calls), the
// records analyses need one by one (events), a bounded window of the most recent copies without
// stacks and polls (recent_events), and the GPU's own activity up to a bound (gpu_activities). The
// per-record path touches no database and allocates nothing in the steady state: one lookup of
// the thread for copies, syncs, frees and polls, one probe of an open-addressing table, one store
// into a preallocated ring or a vector reused from pass to pass.
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainshim/copy_pairing.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::collector {

// GPU activity rows kept per process (TRAINSHIM_GPU_ROWS). A row costs about 60 bytes of the
// database with its index: 2 M rows are about 120 MB per process, a day of a job that runs
// 2,500 kernels a second while the timeline is on at the default duty cycle (2 s of every 20),
// a few hours of one that runs 25,000. The report needs whole steps, not every one of them: past
// the bound the records are still counted in `calls`.
inline constexpr uint64_t kDefaultGpuRows = 2'000'000;

// The key of a `calls` row within its process (schema.def).
struct CallKey {
  uint16_t api = 0;
  Direction direction = Direction::None;
  HostMemory host_memory = HostMemory::Unknown;
  bool null_object = false;
  Direction follows_copy = Direction::None;
  uint32_t native_stack = 0;
  uint32_t python_stack = 0;
  bool operator==(const CallKey&) const = default;
};

struct CallTotals {
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t total_ns = 0;
  uint64_t max_ns = 0;
  uint64_t first_begin_ns = std::numeric_limits<uint64_t>::max();
  uint64_t last_end_ns = 0;
};

// A record as stored in `events` or `recent_events`: its times converted, its pairing found.
struct StoredEvent {
  EventRecord record;
  uint64_t begin_ns;
  uint64_t end_ns;
  Direction follows_copy;
};

// Totals per key since the last take: open addressing with linear probing over a power-of-two
// table, so that the per-record update is a hash, a probe and six adds.
class CallTable {
 public:
  CallTable();
  CallTotals& at(const CallKey& key);
  template <class Visit>
  void for_each(const Visit& visit) const {
    for (uint32_t i : used_) visit(slots_[i].key, slots_[i].totals);
  }
  std::size_t size() const { return used_.size(); }
  // Forgets every key (the capacity stays).
  void clear();

 private:
  struct Slot {
    CallKey key;
    bool used = false;
    CallTotals totals;
  };
  void grow();

  std::vector<Slot> slots_;
  static constexpr uint64_t kNoSlot = ~uint64_t{0};
  std::vector<uint32_t> used_;  // indices of used slots, in insertion order
  uint64_t mask_;
  uint64_t last_ = kNoSlot;  // the slot found last
};

// The most recent `capacity` copies without stacks and polls, oldest overwritten first; the memory is
// taken once.
class RecentWindow {
 public:
  explicit RecentWindow(uint32_t capacity) : capacity_(capacity), events_(capacity) {}
  void push(const StoredEvent& e) {
    if (capacity_ == 0) return;
    events_[next_ % capacity_] = e;
    ++next_;
  }
  uint32_t capacity() const { return capacity_; }
  uint32_t size() const { return next_ < capacity_ ? uint32_t(next_) : capacity_; }
  // Oldest first.
  template <class Visit>
  void for_each(const Visit& visit) const {
    const uint64_t n = size();
    for (uint64_t i = next_ - n; i < next_; ++i) visit(events_[i % capacity_]);
  }
  // What a collector that died had written: the window goes on from there, as written.
  void restore(const std::vector<StoredEvent>& events) {
    for (const StoredEvent& e : events) push(e);
  }
  // Every event pushed so far, restored ones included: what came since a moment is the difference.
  uint64_t pushed() const { return next_; }

 private:
  uint32_t capacity_;
  std::vector<StoredEvent> events_;
  uint64_t next_ = 0;
};

// What a collective's GPU timing adds to the collective's row.
struct GpuTiming {
  uint64_t gpu_ns = 0;
  uint32_t flags = 0;     // the timing's flags: the call's, with kGroupInProgress / kExchange added for a group
  uint32_t exchange = 0;  // with kExchange: the exchange's number on the communicator
};
GpuTiming gpu_timing_of(const EventRecord& timing);

// Pairs each collective's GPU timing with the collective's `events` row. The shim's polling thread
// writes the timing into its own ring once the GPU has finished: usually a pass or more after the
// collective (never, on a hang), and now and then a pass before it (the collective's ring is read
// up to 64 records behind its moving head). The timing is a copy of the collective's record (of its
// operation's first call, for a group) whose api, detail, stacks and thread are its own, and, for
// a group, whose flags and (for an exchange) sequence may say more: it is matched by what it copies
// unchanged (communicator, stream, sequence, peer, point-to-point and send bits) and, among the
// calls that share those (the calls of one operation of a group; the point-to-point calls of
// earlier exchanges, for an exchange's timing), by the nearest begin: the same clock reading,
// converted in another pass, or by another collector after a restart.
//
// Both sides are rows of `events`: a collective waiting for its timing (its row will be updated),
// a timing waiting for its collective (its own row, deleted once folded into the collective's),
// so that a collector that replaces a dead one rebuilds both from the database. Each side is
// bounded: an entry is forgotten once kMaxAwaitedTimings later ones came (a call never timed: the
// later calls of a group's operation, an operation cancelled or left on NCCL's thread), an early
// timing's row deleted with it; the timing stays counted in `calls`.
class TimingFolder {
 public:
  // The shim's pool holds 8,192 events per device, two per operation in flight: 4,096 operations
  // can still be timed on one device; the rest is room for calls that never will be.
  static constexpr std::size_t kMaxAwaitedTimings = 16384;

  // A collective the shim may still time, stored as `row`.
  void await(const EventRecord& call, uint64_t begin_ns, int64_t row);
  // The row of the collective `timing` belongs to, forgotten here; nullopt when it was not read yet.
  std::optional<int64_t> take_collective(const EventRecord& timing, uint64_t begin_ns);
  // A timing read before its collective, stored as `row`.
  void hold_early(const EventRecord& timing, uint64_t begin_ns, int64_t row);
  struct Early {
    int64_t row;
    GpuTiming timing;
  };
  // The early timing of the collective `call`, forgotten here; nullopt when none came.
  std::optional<Early> take_early(const EventRecord& call, uint64_t begin_ns);
  // Rows of early timings forgotten since the last call (beyond the bound), to delete.
  std::vector<int64_t> take_dropped_early();
  // Forgets everything (the process ended): the rows of the early timings still held, to delete.
  std::vector<int64_t> clear();

  std::size_t awaiting() const { return awaiting_.size(); }
  std::size_t early() const { return early_.size(); }

  // Whether the shim may time `call` (a collective not flagged untimed).
  static bool timable(const EventRecord& call);

 private:
  // What a timing copies of its collective's record unchanged, but the sequence of a
  // point-to-point call (an exchange's timing carries the exchange's number instead).
  struct Key {
    uint64_t object, stream;
    uint32_t sequence_or_peer, kind;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const;
  };
  struct Entry {
    uint32_t sequence;
    uint64_t begin_ns;
    int64_t row;
    uint64_t order;
    GpuTiming timing;  // early timings
  };
  using Map = std::unordered_multimap<Key, Entry, KeyHash>;
  static Key key_of(const EventRecord& r);
  // Among the entries of `map` under `key` that `pairs` accepts, the one that began nearest to
  // `begin_ns` (the oldest on a tie); map.end() when none.
  template <class Pairs>
  static Map::iterator nearest(Map& map, const Key& key, uint64_t begin_ns, const Pairs& pairs);
  void add(Map& map, std::deque<std::pair<Key, uint64_t>>& order, const Key& key, Entry entry, bool early);

  Map awaiting_, early_;
  std::deque<std::pair<Key, uint64_t>> awaiting_order_, early_order_;  // oldest first, entries taken included
  uint64_t next_order_ = 0;
  std::vector<int64_t> dropped_early_;
};

class ProcessIngest {
 public:
  // gpu_rows: the most GPU activity records kept one by one, over the process's whole life.
  explicit ProcessIngest(uint32_t recent_capacity, uint64_t gpu_rows = kDefaultGpuRows)
      : recent_(recent_capacity), gpu_rows_(gpu_rows) {}

  // One validated record, its times already CLOCK_MONOTONIC ns. Returns its class.
  ApiClass add(const EventRecord& record, uint64_t begin_ns, uint64_t end_ns);

  // Since the last clear_pass(): the aggregates, the records kept one by one, the records counted.
  const CallTable& calls() const { return calls_; }
  const std::vector<StoredEvent>& kept() const { return kept_; }
  uint64_t stored() const { return stored_; }
  // Since the last clear_pass(): the GPU activity records kept (rows of gpu_activities), and how
  // many came past the bound.
  const std::vector<StoredEvent>& gpu_activities() const { return gpu_; }
  uint64_t gpu_not_kept() const { return gpu_not_kept_; }
  void clear_pass();
  // The GPU activity rows a collector that died had kept of this process: they count against the bound.
  void restore_gpu_rows(uint64_t kept) { gpu_rows_kept_ = kept; }

  RecentWindow& recent() { return recent_; }
  TimingFolder& timings() { return timings_; }

  // The last record that was not a collective's timing (what the process was doing last).
  struct Activity {
    uint16_t api = 0;
    uint32_t python_stack = 0;
    uint32_t rank_in_comm = 0;
    uint64_t begin_ns = 0;
    bool seen = false;
  };
  const Activity& last_activity() const { return last_activity_; }

 private:
  struct Thread {
    LastPairedCall pairing;
    uint32_t poll_native = 0, poll_python = 0;  // of its last poll that carried stacks
  };
  Thread& thread(uint32_t tid);

  CallTable calls_;
  std::vector<StoredEvent> kept_;
  std::vector<StoredEvent> gpu_;
  RecentWindow recent_;
  TimingFolder timings_;
  uint64_t stored_ = 0;
  uint64_t gpu_rows_;
  uint64_t gpu_rows_kept_ = 0;  // over the process's life
  uint64_t gpu_not_kept_ = 0;   // this pass
  Activity last_activity_;
  // Records come in runs from one thread: the last one looked up is kept at hand.
  std::unordered_map<uint32_t, Thread> threads_;
  uint32_t cached_tid_ = 0;
  Thread* cached_thread_ = nullptr;
};

}  // namespace trainshim::collector
