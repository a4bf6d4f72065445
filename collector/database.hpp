#pragma once
// The run database the collector writes and every CLI command reads. Schema: docs/database.md.
#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ingest.hpp"
#include "trainshim/protocol.hpp"
#include "trainshim/schema.hpp"
#include "wal_checkpointer.hpp"

namespace trainshim::collector {

using schema::kSchemaVersion;

// Where `launch` writes when its database is not named for it (no --out): `path` itself unless it
// holds another launch or is no database this collector can add to (an earlier trainshim's
// schema, a file that is no database), else the first of <stem>.2.db, <stem>.3.db, ... that is
// free or holds this launch (a collector that exited idle and is started again for the same
// launch adds to what it wrote). An empty `launch` (none known) takes any database of this schema.
std::string database_path_for_launch(const std::string& path, const std::string& launch);

class Database {
 public:
  // Creates the file (mode 0600) and schema, or opens an existing database of this job and
  // launch to add to it. Refuses a symbolic link, a file of another user or not a regular file,
  // and a database of another launch (`launch` empty: any). Throws std::runtime_error with a
  // message that says what to do.
  explicit Database(const std::string& path, const std::string& job, const std::string& launch = {});
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  int64_t add_process(const std::string& segment, const SegmentHeader& header);
  // The row of a process another collector was reading when it stopped: same segment, pid and
  // clock anchor, not ended. nullopt when there is none.
  std::optional<int64_t> find_unended_process(const std::string& segment, const SegmentHeader& header);
  // Where reading of that process stopped: ring index -> next position (the side ring's index is
  // the ring count).
  std::map<uint32_t, uint64_t> segment_positions(int64_t process_id);
  void set_segment_position(int64_t process_id, uint32_t ring, uint64_t position);
  // Once the process has ended and its segment is drained.
  void forget_segment_positions(int64_t process_id);
  // The modules recorded of the process: id, path, load base, build id (bytes).
  struct StoredModule {
    uint32_t id;
    std::string path;
    uint64_t base;
    std::string build_id;
  };
  std::vector<StoredModule> modules(int64_t process_id);
  // The process's `recent_events`, oldest first.
  std::vector<StoredEvent> recent_events(int64_t process_id);

  // One row of `events`, with its collective's GPU timing when it came first; returns its rowid.
  int64_t add_event(int64_t process_id, const EventRecord& record, uint64_t begin_ns, uint64_t end_ns,
                    Direction follows_copy = Direction::None, const std::optional<GpuTiming>& timing = std::nullopt);
  // Adds to the `calls` row of the key (or creates it).
  void add_calls(int64_t process_id, const CallKey& key, const CallTotals& totals);
  // What a pass gathered of the process since its last clear_pass(): its `calls` totals, its
  // records kept one by one, each GPU timing folded into its collective's row (ingest.timings()),
  // and its GPU activity rows.
  void add_pass(int64_t process_id, ProcessIngest& ingest);
  // What the process's `events` rows still wait for: its collectives without their timing (the
  // newest TimingFolder::kMaxAwaitedTimings) and its timings read before their collective. Read
  // without an index, once, by a collector that resumes a dead one's row.
  void restore_timings(int64_t process_id, TimingFolder& folder);
  // The process ended: the timings whose collective never came are dropped (they stay counted).
  void forget_timings(TimingFolder& folder);
  // One row of `gpu_activities`: a GPU activity record, its times converted.
  void add_gpu_activity(int64_t process_id, const StoredEvent& activity);
  // The process's rows of `gpu_activities` (a collector that resumes a dead one's row counts them
  // against the bound).
  uint64_t gpu_activity_rows(int64_t process_id);
  // One row of `samples`.
  void add_sample(int64_t process_id, const SampleRow& sample);
  // The process's rows of `samples` (a collector that resumes a dead one's row counts them against the bound).
  uint64_t sample_rows(int64_t process_id);
  // A thread's row of `threads_now`, written whole; `at_unix_ns`: its at_ns on CLOCK_REALTIME.
  void set_thread_now(int64_t process_id, uint32_t tid, const ThreadNow& now, int64_t at_unix_ns);
  // The process's rows of `threads_now` (a collector that resumes a dead one's row goes on from them).
  std::vector<std::pair<uint32_t, ThreadNow>> threads_now(int64_t process_id);
  // A row of `process_facts`, replacing the key's value.
  void set_fact(int64_t process_id, std::string_view key, std::string_view value);
  // The process's `process_facts`, by key.
  std::map<std::string, std::string> facts(int64_t process_id);
  // One row of `recent_events`; returns its rowid (rowid order is the table's time order).
  int64_t add_recent_event(int64_t process_id, const StoredEvent& event);
  // The process's rows of `recent_events` with rowids first..last.
  void forget_recent_events(int64_t process_id, int64_t first, int64_t last);
  // The rowids of the process's rows of `recent_events`, in order.
  std::vector<int64_t> recent_event_rowids(int64_t process_id);
  void add_module(int64_t process_id, uint32_t id, const std::string& path, uint64_t base, const std::string& build_id);
  struct NativeFrame {
    uint64_t address;
    std::string module, function, file;
    int line;
  };
  void add_native_frame(int64_t process_id, uint32_t stack_id, int depth, const NativeFrame& frame);
  // A file or function name of Python frames, by its id in the process.
  void add_python_string(int64_t process_id, uint32_t id, const std::string& text);
  std::vector<std::pair<uint32_t, std::string>> python_strings(int64_t process_id);
  void add_python_frame(int64_t process_id, uint32_t stack_id, int depth, const std::string& file,
                        const std::string& function, int line, const std::string& source);
  struct PythonFrame {
    std::string file, function;
    int line;
  };
  // The frames of a Python stack of the process, innermost first (none when it was not published).
  std::vector<PythonFrame> python_frames(int64_t process_id, uint32_t stack_id);
  // borrowed: the stack of the thread blocked in backward, taken by an autograd engine thread;
  // omitted: frames left out between the innermost and the outermost kept.
  void add_python_stack(int64_t process_id, uint32_t stack_id, bool borrowed, uint32_t omitted);

  // What a process's row counts: written whole whenever it changes.
  struct ProcessCounters {
    uint64_t events = 0;
#define TS_COUNTER(kind, column, json_key, words, meaning) uint64_t column = 0;
#include "trainshim/counters.def"
    uint32_t python_stacks = 0;  // SegmentHeader::python_stacks
    uint32_t gpu_timeline = 0;   // SegmentHeader::gpu_timeline
    uint32_t sampler = 0;        // SegmentHeader::sampler
    uint32_t sample_hz = 0;      // SegmentHeader::sample_hz, 0 when not a rate the shim can run at
    bool ended = false;
    bool operator==(const ProcessCounters&) const = default;
  };
  void update_process(int64_t process_id, const ProcessCounters& counters);
  // The counts of a process's row as written so far (a collector that resumes a dead one's row
  // goes on from them); python_stacks, gpu_timeline and sampler are 0, they are stored only as words.
  ProcessCounters process_counters(int64_t process_id);
  void log(const std::string& level, const std::string& message);
  // `kind`: `collective` or `no_progress` (schema.def's hangs.kind).
  void record_hang(const std::string& communicator, uint32_t sequence, const std::string& kind, const std::string& op,
                   const std::string& waiting, const std::string& missing, int64_t waited_ns,
                   const std::string& message, const std::string& stacks);

  // Writes are grouped in transactions; commit makes them visible to readers. A commit never
  // checkpoints the WAL: a thread of the database's own does (wal_checkpointer.hpp).
  void commit();
  // Checkpoints that thread has run so far.
  uint64_t checkpoints() const { return checkpointer_->checkpoints(); }

 private:
  // The rows of a per-process table (one of the schema's) that belong to `process_id`.
  uint64_t process_rows(std::string_view table, int64_t process_id);
  void exec(const char* sql);
  void finalize_all();
  void begin_if_needed();
  sqlite3_stmt* prepare(const char* sql);

  sqlite3* db_ = nullptr;
  // A collective's row gets its timing.
  void fold_timing(int64_t row, const GpuTiming& timing);
  void delete_event(int64_t row);

  sqlite3_stmt* insert_event_ = nullptr;
  sqlite3_stmt* fold_timing_ = nullptr;
  sqlite3_stmt* delete_event_ = nullptr;
  sqlite3_stmt* insert_python_string_ = nullptr;
  sqlite3_stmt* upsert_calls_ = nullptr;
  sqlite3_stmt* insert_recent_ = nullptr;
  sqlite3_stmt* insert_gpu_activity_ = nullptr;
  sqlite3_stmt* delete_recent_rows_ = nullptr;
  sqlite3_stmt* upsert_position_ = nullptr;
  sqlite3_stmt* insert_process_ = nullptr;
  sqlite3_stmt* update_process_ = nullptr;
  sqlite3_stmt* insert_log_ = nullptr;
  sqlite3_stmt* insert_python_stack_ = nullptr;
  sqlite3_stmt* insert_module_ = nullptr;
  sqlite3_stmt* insert_native_frame_ = nullptr;
  sqlite3_stmt* insert_python_frame_ = nullptr;
  sqlite3_stmt* upsert_hang_ = nullptr;
  sqlite3_stmt* insert_sample_ = nullptr;
  sqlite3_stmt* upsert_thread_now_ = nullptr;
  sqlite3_stmt* upsert_fact_ = nullptr;
  bool in_transaction_ = false;
  std::unique_ptr<WalCheckpointer> checkpointer_;
};

}  // namespace trainshim::collector
