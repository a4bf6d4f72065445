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
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainshim/copy_pairing.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::collector {

// GPU activity rows kept per process (TRAINSHIM_GPU_ROWS). A row takes about 50 bytes of the
// database with its index (scripts/bench/ingest --per-record): 2 M rows are about 100 MB per
// process, under 1 GB for a node of 8 ranks. At the default duty cycle (on 2 s of every 20) they
// hold the first 2 hours of a job whose GPU runs 2,500 kernels, copies and memsets a second, a
// day of one that runs 230: thousands of steps, more than the report needs to measure a step's
// idle share. Past the bound the records are still counted in `calls`.
inline constexpr uint64_t kDefaultGpuRows = 2'000'000;

// Sample rows kept per process (TRAINSHIM_SAMPLE_ROWS): at 50 Hz and two sampled threads, the
// first 2.8 hours of a rank, about 40 bytes each with the index. Past the bound the samples are
// still counted in `calls` and go on telling `threads_now` and the hang watch what each thread does.
inline constexpr uint64_t kDefaultSampleRows = 1'000'000;
// Threads of one process followed in `threads_now`: the main thread and the threads that made CUDA
// calls are a handful; a segment that names more (forged, or garbled) costs no more memory than this.
inline constexpr std::size_t kMostSampledThreads = 4096;

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

// One Sample record as `samples` keeps it (schema.def).
struct SampleRow {
  uint32_t tid = 0;
  uint64_t at_ns = 0;
  uint32_t tick = 0;
  char state = 0;        // a letter, 0 unknown
  int64_t syscall = -1;  // -1: none
  uint32_t python_stack = 0;
};

// What a sampled thread is doing as its latest sample says, and since when its samples show it
// (the same Python stack, state and system call): a row of `threads_now`.
struct ThreadNow {
  uint64_t at_ns = 0;
  uint64_t since_ns = 0;
  uint32_t python_stack = 0;
  char state = 0;
  int64_t syscall = -1;
  bool written_pending = false;  // sampled since the last clear_pass(): in threads_sampled()
  bool same_as(const SampleRow& s) const {
    return python_stack == s.python_stack && state == s.state && syscall == s.syscall;
  }
};

// A Sample record's fields as stored: its state only when it is a letter (anything else from the
// segment is no state at all).
SampleRow sample_row(const EventRecord& sample, uint64_t at_ns);

// The process's census (ProcessSample records) as `process_facts` keys: the latest counts and the
// largest seen.
inline constexpr std::string_view kCensusKeys[] = {"threads",      "threads_max",    "workers",       "workers_max",
                                                   "workers_seen", "workers_cpu_ns", "other_children"};
struct Census {
  ProcessCensus latest;
  uint64_t threads_max = 0;
  uint64_t workers_max = 0;
  void add(const ProcessCensus& c);
  // The value of each of kCensusKeys, in its order.
  std::vector<std::pair<std::string_view, uint64_t>> facts() const;
};

class ProcessIngest {
 public:
  // gpu_rows, sample_rows: the most GPU activity records and samples kept one by one, over the
  // process's whole life.
  explicit ProcessIngest(uint32_t recent_capacity, uint64_t gpu_rows = kDefaultGpuRows,
                         uint64_t sample_rows = kDefaultSampleRows)
      : recent_(recent_capacity), gpu_rows_(gpu_rows), sample_rows_(sample_rows) {}

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

  // Since the last clear_pass(): the samples kept (rows of `samples`), and how many came past the bound.
  const std::vector<SampleRow>& samples() const { return samples_; }
  uint64_t samples_not_kept() const { return samples_not_kept_; }
  // The sample rows a collector that died had kept of this process: they count against the bound.
  void restore_sample_rows(uint64_t kept) { sample_rows_kept_ = kept; }
  // Every sampled thread of the process, by tid, as its latest sample says.
  const std::unordered_map<uint32_t, ThreadNow>& threads_now() const { return threads_now_; }
  // The threads whose samples came since the last clear_pass() (their `threads_now` rows to rewrite).
  const std::vector<uint32_t>& threads_sampled() const { return threads_sampled_; }
  // What a collector that died had written of a thread: its run of identical samples goes on.
  void restore_thread_now(uint32_t tid, const ThreadNow& now);
  const Census& census() const { return census_; }
  // Whether a census came since the last clear_pass().
  bool census_changed() const { return census_changed_; }
  Census& census() { return census_; }
  // The latest end of a record that was not the sampler's: when the process last did something
  // it recorded (0: nothing yet).
  uint64_t last_record_ns() const { return last_record_ns_; }

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
  std::vector<SampleRow> samples_;
  uint64_t sample_rows_;
  uint64_t sample_rows_kept_ = 0;  // over the process's life
  uint64_t samples_not_kept_ = 0;  // this pass
  std::unordered_map<uint32_t, ThreadNow> threads_now_;
  std::vector<uint32_t> threads_sampled_;  // this pass, each once
  Census census_;
  bool census_changed_ = false;
  uint64_t last_record_ns_ = 0;
  Activity last_activity_;
  // Records come in runs from one thread: the last one looked up is kept at hand.
  std::unordered_map<uint32_t, Thread> threads_;
  uint32_t cached_tid_ = 0;
  Thread* cached_thread_ = nullptr;
};

}  // namespace trainshim::collector
