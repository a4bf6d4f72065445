#include "database.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <utility>
#include <vector>

#include "trainshim/counters.hpp"

namespace trainshim::collector {

namespace {

void step_and_reset(sqlite3* db, sqlite3_stmt* stmt) {
  const int rc = sqlite3_step(stmt);
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  if (rc != SQLITE_DONE) throw std::runtime_error(std::string("database error: ") + sqlite3_errmsg(db));
}

// The schema of an earlier version, written before `meta` held `writer_version`: read only to
// name its version in the refusal.
std::string found_schema_version(sqlite3* db) {
  sqlite3_stmt* s = nullptr;
  std::string found;
  if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='schema_version'", -1, &s, nullptr) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    found = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
  sqlite3_finalize(s);
  return found;
}

// "dropped_ring_full, dropped_not_ready, ...": the counter columns of `processes`, in order.
std::string counter_columns() {
  std::string columns;
  for (const CounterInfo& c : kCounters) (columns += columns.empty() ? "" : ", ") += c.column;
  return columns;
}

// A process's row is written whole: what the collector counts (events, the counters) as totals.
std::string update_process_statement() {
  std::string sql = "UPDATE processes SET events=?";
  for (const CounterInfo& c : kCounters) ((sql += ", ") += c.column) += "=?";
  return sql +
         ", ended=?, python_version=?, python_stacks_unavailable=?, gpu_timeline=?, sampler=?, sample_hz=? WHERE id=?";
}

}  // namespace

namespace {

std::string numbered_path(const std::string& path, int n) {
  if (n == 1) return path;
  if (path.ends_with(".db")) return fmt::format("{}.{}.db", path.substr(0, path.size() - 3), n);
  return fmt::format("{}.{}", path, n);
}

// The launch an existing database of this user holds, empty if unknown or not such a database.
// What the file at `path` holds, as far as a new launch may write there: the launch its meta
// names, and `foreign` when it is no database this collector can add to (an earlier trainshim's
// schema, or no SQLite database at all). Not a regular file of this user: nothing is said (the
// Database refuses it, with a message).
struct Holder {
  std::string launch;
  bool foreign = false;
};
Holder holder_of(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) return {};
  sqlite3* db = nullptr;
  Holder holder;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOFOLLOW, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 2000);
    sqlite3_stmt* s = nullptr;
    const int rc = sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='launch'", -1, &s, nullptr);
    if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
      holder.launch = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    const std::string schema = found_schema_version(db);
    holder.foreign = rc == SQLITE_NOTADB || (!schema.empty() && schema != std::to_string(kSchemaVersion));
  }
  sqlite3_close(db);
  return holder;
}

// Opens `path` as the collector's own database file: created 0600 where there is none; never
// through a symbolic link, never a file of another user or one that is not a regular file (in a
// shared directory another user can plant either, to read the run or to have it written where
// they chose). SQLite's -wal, -shm and -journal beside it take the database's mode and owner, so
// a planted one is refused too. Returns the descriptor, open until SQLite has the file.
int open_own_database_file(const std::string& path) {
  const auto refuse = [&](const std::string& file, const std::string& why) {
    throw std::runtime_error(fmt::format("refusing the database {}: {} {}; remove it, or set TRAINSHIM_OUT to a file "
                                         "in a directory only you can write",
                                         path, file, why));
  };
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    const std::string companion = path + suffix;
    struct stat st {};
    if (lstat(companion.c_str(), &st) != 0) continue;
    if (!S_ISREG(st.st_mode)) refuse(companion, "is not a regular file");
    if (st.st_uid != geteuid()) refuse(companion, fmt::format("belongs to uid {}, not to you", st.st_uid));
  }
  // Looked at first: in a sticky directory the kernel may answer a planted link with EACCES.
  if (struct stat st{}; lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) refuse(path, "is a symbolic link");
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0600);
  if (fd < 0 && errno == ELOOP) refuse(path, "is a symbolic link");
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot open the database {}: {} (set TRAINSHIM_OUT to a writable path)", path,
                                         std::strerror(errno)));
  struct stat st {};
  std::string problem;
  if (fstat(fd, &st) != 0) problem = std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) problem = "is not a regular file";
  else if (st.st_uid != geteuid()) problem = fmt::format("belongs to uid {}, not to you", st.st_uid);
  if (!problem.empty()) {
    close(fd);
    refuse(path, problem);
  }
  return fd;
}

}  // namespace

std::string database_path_for_launch(const std::string& path, const std::string& launch) {
  for (int n = 1; n < 1000; ++n) {
    const std::string candidate = numbered_path(path, n);
    struct stat st {};
    if (lstat(candidate.c_str(), &st) != 0) return candidate;
    const Holder held = holder_of(candidate);
    if (held.foreign) continue;
    // Another user's file, a link: the Database refuses it, with a message.
    if (launch.empty() || held.launch.empty() || held.launch == launch) return candidate;
  }
  return path;
}

Database::Database(const std::string& path, const std::string& job, const std::string& launch) {
  const int fd = open_own_database_file(path);
  struct stat held {};
  fstat(fd, &held);
  const int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, nullptr);
  // SQLite has not locked the file yet: closing this descriptor releases no lock of SQLite's.
  close(fd);
  struct stat opened {};
  const bool replaced =
      lstat(path.c_str(), &opened) != 0 || opened.st_ino != held.st_ino || opened.st_dev != held.st_dev;
  if (rc == SQLITE_OK && replaced) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw std::runtime_error(fmt::format("the database {} was replaced while it was opened: set TRAINSHIM_OUT to a "
                                         "file in a directory only you can write",
                                         path));
  }
  if (rc != SQLITE_OK) {
    const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw std::runtime_error(
        fmt::format("cannot open the database {}: {} (set TRAINSHIM_OUT to a writable path)", path, why));
  }
  sqlite3_busy_timeout(db_, 2000);
  try {
    exec("PRAGMA journal_mode=WAL");
    // A commit never waits for the disk (records stay in their ring until it returns): the WAL is
    // synced by the checkpointer before it is copied, and a power loss can lose at most the commits
    // since, as it loses the rings in /dev/shm. Turned back to NORMAL for the last checkpoint.
    exec("PRAGMA synchronous=OFF");
    // Looked at before anything is created: a database of another version is left as it is.
    const std::string found = found_schema_version(db_);
    if (!found.empty() && found != std::to_string(kSchemaVersion))
      throw std::runtime_error(fmt::format("{} holds schema version {}, this collector writes version {}: "
                                           "set TRAINSHIM_OUT to a new file",
                                           path, found, kSchemaVersion));
    exec(schema::create_statements().c_str());
    sqlite3_stmt* set_meta = prepare(schema::insert_statement("meta", schema::OnConflict::Merge).c_str());
    const auto meta = [&](const char* key, const std::string& value) {
      sqlite3_bind_text(set_meta, 1, key, -1, SQLITE_STATIC);
      sqlite3_bind_text(set_meta, 2, value.c_str(), int(value.size()), SQLITE_TRANSIENT);
      step_and_reset(db_, set_meta);
    };
    try {
      if (found.empty()) {
        meta("schema_version", std::to_string(kSchemaVersion));
        meta("job", job);
        meta("created_unix", std::to_string(std::time(nullptr)));
      } else {
        sqlite3_stmt* held = prepare("SELECT value FROM meta WHERE key='launch'");
        const std::string held_launch =
            sqlite3_step(held) == SQLITE_ROW ? reinterpret_cast<const char*>(sqlite3_column_text(held, 0)) : "";
        sqlite3_finalize(held);
        if (!launch.empty() && !held_launch.empty() && held_launch != launch)
          throw std::runtime_error(fmt::format("{} holds another launch ({}), not this one ({}): set TRAINSHIM_OUT to "
                                               "a new file",
                                               path, held_launch, launch));
        // A database written before launches were recorded, or by a collector that knew none,
        // takes the first launch that comes.
      }
      if (!launch.empty()) {
        sqlite3_stmt* insert = prepare("INSERT OR IGNORE INTO meta VALUES('launch', ?)");
        sqlite3_bind_text(insert, 1, launch.c_str(), int(launch.size()), SQLITE_TRANSIENT);
        const int step = sqlite3_step(insert);
        sqlite3_finalize(insert);
        if (step != SQLITE_DONE) throw std::runtime_error(std::string("database error: ") + sqlite3_errmsg(db_));
      }
      // The trainshim that wrote last: collectors of one launch are of one installation.
      meta("writer_version", std::string(schema::kWriterVersion));
    } catch (...) {
      sqlite3_finalize(set_meta);
      throw;
    }
    sqlite3_finalize(set_meta);
    exec("BEGIN");
    // The names of the integers in other tables, rewritten each time: the list is this build's.
    const auto fill = [&](const char* table, std::size_t count, auto names_of) {
      sqlite3_stmt* s = prepare(schema::insert_statement(table, schema::OnConflict::Merge).c_str());
      try {
        for (std::size_t i = 0; i < count; ++i) {
          sqlite3_bind_int64(s, 1, int64_t(i));
          int column = 2;
          for (std::string_view name : names_of(i))
            sqlite3_bind_text(s, column++, name.data(), int(name.size()), SQLITE_STATIC);
          step_and_reset(db_, s);
        }
      } catch (...) {
        sqlite3_finalize(s);
        throw;
      }
      sqlite3_finalize(s);
    };
    using Names = std::vector<std::string_view>;
    fill("apis", kApiCount, [](std::size_t i) { return Names{kApis[i].name, api_class_name(kApis[i].api_class)}; });
    fill("directions", kDirectionCount, [](std::size_t i) { return Names{direction_name(Direction(i))}; });
    fill("host_memories", kHostMemoryCount, [](std::size_t i) { return Names{host_memory_name(HostMemory(i))}; });
    exec("COMMIT");
    using schema::insert_statement;
    using schema::OnConflict;
    insert_event_ = prepare(insert_statement("events").c_str());
    // The timing's flags add what only the timing knows (a group's launch on NCCL's thread, an exchange).
    fold_timing_ = prepare("UPDATE events SET gpu_ns = ?, flags = flags | ?, exchange = ? WHERE rowid = ?");
    delete_event_ = prepare("DELETE FROM events WHERE rowid = ?");
    insert_python_string_ = prepare(insert_statement("python_strings", OnConflict::Ignore).c_str());
    insert_recent_ = prepare(insert_statement("recent_events").c_str());
    insert_gpu_activity_ = prepare(insert_statement("gpu_activities").c_str());
    delete_recent_rows_ = prepare("DELETE FROM recent_events WHERE rowid BETWEEN ? AND ? AND process_id = ?");
    upsert_calls_ = prepare(insert_statement("calls", OnConflict::Merge).c_str());
    upsert_position_ = prepare(insert_statement("segment_positions", OnConflict::Merge).c_str());
    insert_process_ = prepare(insert_statement("processes").c_str());
    update_process_ = prepare(update_process_statement().c_str());
    // A stack published twice (two threads met it at once) is the same stack: keep the first.
    insert_module_ = prepare(insert_statement("modules", OnConflict::Ignore).c_str());
    insert_native_frame_ = prepare(insert_statement("native_frames", OnConflict::Ignore).c_str());
    insert_python_frame_ = prepare(insert_statement("python_frames", OnConflict::Ignore).c_str());
    insert_python_stack_ = prepare(insert_statement("python_stacks", OnConflict::Ignore).c_str());
    insert_log_ = prepare(insert_statement("collector_log").c_str());
    // A hang is written when found and rewritten while it lasts (how long the ranks have waited).
    upsert_hang_ = prepare(insert_statement("hangs", OnConflict::Merge).c_str());
    insert_sample_ = prepare(insert_statement("samples").c_str());
    upsert_thread_now_ = prepare(insert_statement("threads_now", OnConflict::Merge).c_str());
    upsert_fact_ = prepare(insert_statement("process_facts", OnConflict::Merge).c_str());
    checkpointer_ = std::make_unique<WalCheckpointer>(path, held.st_dev, held.st_ino);
    checkpointer_->watch(db_);
  } catch (...) {
    finalize_all();
    sqlite3_close(db_);
    throw;
  }
}

Database::~Database() {
  if (in_transaction_) sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
  finalize_all();
  checkpointer_.reset();
  sqlite3_exec(db_, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr);
  // A finished database is one file: WAL only speeds up the drain. Left in WAL mode, every
  // read-only connection of the CLI would create a -wal and a -shm it cannot remove. Fails
  // harmlessly (stays WAL) while a reader has it open.
  sqlite3_exec(db_, "PRAGMA journal_mode=DELETE", nullptr, nullptr, nullptr);
  sqlite3_close(db_);
}

void Database::finalize_all() {
  for (auto* s :
       {insert_event_,        fold_timing_,        delete_event_,         upsert_calls_,        insert_recent_,
        insert_gpu_activity_, delete_recent_rows_, upsert_position_,      insert_process_,      update_process_,
        insert_log_,          insert_module_,      insert_python_string_, insert_native_frame_, insert_python_frame_,
        insert_python_stack_, upsert_hang_,        insert_sample_,        upsert_thread_now_,   upsert_fact_})
    sqlite3_finalize(s);
}

void Database::exec(const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    std::string why = error ? error : "unknown error";
    sqlite3_free(error);
    throw std::runtime_error("database error: " + why);
  }
}

sqlite3_stmt* Database::prepare(const char* sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr) != SQLITE_OK)
    throw std::runtime_error(std::string("database error: ") + sqlite3_errmsg(db_));
  return stmt;
}

void Database::begin_if_needed() {
  if (in_transaction_) return;
  exec("BEGIN");
  in_transaction_ = true;
}

void Database::commit() {
  if (!in_transaction_) return;
  exec("COMMIT");
  in_transaction_ = false;
}

int64_t Database::add_process(const std::string& segment, const SegmentHeader& h) {
  begin_if_needed();
  auto text = [&](int i, const char* s, std::size_t capacity) {
    sqlite3_bind_text(insert_process_, i, s, int(strnlen(s, capacity)), SQLITE_TRANSIENT);
  };
  sqlite3_bind_text(insert_process_, 1, segment.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(insert_process_, 2, h.pid);
  text(3, h.host, sizeof h.host);
  sqlite3_bind_int(insert_process_, 4, h.rank);
  sqlite3_bind_int(insert_process_, 5, h.local_rank);
  sqlite3_bind_int(insert_process_, 6, h.world_size);
  text(7, h.job, sizeof h.job);
  text(8, h.command, sizeof h.command);
  sqlite3_bind_int64(insert_process_, 9, int64_t(h.anchor_realtime_ns));
  sqlite3_bind_int64(insert_process_, 10, int64_t(h.anchor_monotonic_ns));
  step_and_reset(db_, insert_process_);
  return sqlite3_last_insert_rowid(db_);
}

namespace {
void bind_event(sqlite3_stmt* s, int64_t process_id, const EventRecord& r, uint64_t begin_ns, uint64_t end_ns,
                Direction follows_copy) {
  const int64_t values[] = {process_id,        r.tid,          r.api,         int64_t(begin_ns), int64_t(end_ns),
                            int64_t(r.bytes),  r.direction,    r.host_memory, int64_t(r.stream), int64_t(r.object),
                            int64_t(r.detail), r.rank_in_comm, r.comm_size,   r.result,          r.native_stack,
                            r.python_stack,    r.sequence,     r.peer,        r.flags,           int64_t(follows_copy)};
  static_assert(std::size(values) == schema::insert_column_count("recent_events"));
  for (int i = 0; i < int(std::size(values)); ++i) sqlite3_bind_int64(s, i + 1, values[i]);
}
// events: the columns of recent_events, then its own.
constexpr int kFlagsParameter = schema::insert_parameter("events", "flags");
constexpr int kGpuNsParameter = schema::insert_parameter("events", "gpu_ns");
constexpr int kExchangeParameter = schema::insert_parameter("events", "exchange");
static_assert(kGpuNsParameter == int(schema::insert_column_count("recent_events")) + 1 &&
              kExchangeParameter == kGpuNsParameter + 1 && schema::insert_column_count("events") == kExchangeParameter);
}  // namespace

int64_t Database::add_event(int64_t process_id, const EventRecord& r, uint64_t begin_ns, uint64_t end_ns,
                            Direction follows_copy, const std::optional<GpuTiming>& timing) {
  begin_if_needed();
  bind_event(insert_event_, process_id, r, begin_ns, end_ns, follows_copy);
  if (timing) {
    sqlite3_bind_int64(insert_event_, kGpuNsParameter, int64_t(timing->gpu_ns));
    sqlite3_bind_int64(insert_event_, kFlagsParameter, int64_t(r.flags | timing->flags));
  } else {
    sqlite3_bind_null(insert_event_, kGpuNsParameter);
  }
  sqlite3_bind_int64(insert_event_, kExchangeParameter, timing ? timing->exchange : 0);
  step_and_reset(db_, insert_event_);
  return sqlite3_last_insert_rowid(db_);
}

void Database::fold_timing(int64_t row, const GpuTiming& timing) {
  begin_if_needed();
  sqlite3_bind_int64(fold_timing_, 1, int64_t(timing.gpu_ns));
  sqlite3_bind_int64(fold_timing_, 2, timing.flags);
  sqlite3_bind_int64(fold_timing_, 3, timing.exchange);
  sqlite3_bind_int64(fold_timing_, 4, row);
  step_and_reset(db_, fold_timing_);
}

void Database::delete_event(int64_t row) {
  begin_if_needed();
  sqlite3_bind_int64(delete_event_, 1, row);
  step_and_reset(db_, delete_event_);
}

void Database::add_pass(int64_t process_id, ProcessIngest& ingest) {
  ingest.calls().for_each([&](const CallKey& key, const CallTotals& totals) { add_calls(process_id, key, totals); });
  TimingFolder& timings = ingest.timings();
  for (const StoredEvent& e : ingest.kept()) {
    const EventRecord& r = e.record;
    if (kApis[r.api].api_class == ApiClass::CollectiveTiming) {
      if (const std::optional<int64_t> row = timings.take_collective(r, e.begin_ns))
        fold_timing(*row, gpu_timing_of(r));
      else timings.hold_early(r, e.begin_ns, add_event(process_id, r, e.begin_ns, e.end_ns, e.follows_copy));
      continue;
    }
    if (!TimingFolder::timable(r)) {
      add_event(process_id, r, e.begin_ns, e.end_ns, e.follows_copy);
      continue;
    }
    const std::optional<TimingFolder::Early> early = timings.take_early(r, e.begin_ns);
    if (early) delete_event(early->row);
    const int64_t row = add_event(process_id, r, e.begin_ns, e.end_ns, e.follows_copy,
                                  early ? std::optional(early->timing) : std::nullopt);
    if (!early) timings.await(r, e.begin_ns, row);
  }
  for (const int64_t row : timings.take_dropped_early()) delete_event(row);
  for (const StoredEvent& activity : ingest.gpu_activities()) add_gpu_activity(process_id, activity);
  for (const SampleRow& sample : ingest.samples()) add_sample(process_id, sample);
}

namespace {
// A null text would bind SQL NULL: an unknown state is the empty text.
std::string_view state_text(const char& state) { return state ? std::string_view(&state, 1) : std::string_view("", 0); }
}  // namespace

void Database::add_sample(int64_t process_id, const SampleRow& sample) {
  begin_if_needed();
  sqlite3_stmt* s = insert_sample_;
  static_assert(schema::insert_column_count("samples") == 7 && schema::insert_parameter("samples", "state") == 5);
  sqlite3_bind_int64(s, 1, process_id);
  sqlite3_bind_int64(s, 2, sample.tid);
  sqlite3_bind_int64(s, 3, int64_t(sample.at_ns));
  sqlite3_bind_int64(s, 4, sample.tick);
  const std::string_view state = state_text(sample.state);
  sqlite3_bind_text(s, 5, state.data(), int(state.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(s, 6, sample.syscall);
  sqlite3_bind_int64(s, 7, sample.python_stack);
  step_and_reset(db_, s);
}

uint64_t Database::sample_rows(int64_t process_id) { return process_rows("samples", process_id); }

void Database::set_thread_now(int64_t process_id, uint32_t tid, const ThreadNow& now, int64_t at_unix_ns) {
  begin_if_needed();
  sqlite3_stmt* s = upsert_thread_now_;
  static_assert(schema::insert_column_count("threads_now") == 8 &&
                schema::insert_parameter("threads_now", "state") == 5 &&
                schema::insert_parameter("threads_now", "since_ns") == 8);
  sqlite3_bind_int64(s, 1, process_id);
  sqlite3_bind_int64(s, 2, tid);
  sqlite3_bind_int64(s, 3, int64_t(now.at_ns));
  sqlite3_bind_int64(s, 4, at_unix_ns);
  const std::string_view state = state_text(now.state);
  sqlite3_bind_text(s, 5, state.data(), int(state.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(s, 6, now.syscall);
  sqlite3_bind_int64(s, 7, now.python_stack);
  sqlite3_bind_int64(s, 8, int64_t(now.since_ns));
  step_and_reset(db_, s);
}

std::vector<std::pair<uint32_t, ThreadNow>> Database::threads_now(int64_t process_id) {
  sqlite3_stmt* s =
      prepare("SELECT tid, at_ns, since_ns, python_stack, state, syscall FROM threads_now WHERE process_id = ?");
  sqlite3_bind_int64(s, 1, process_id);
  std::vector<std::pair<uint32_t, ThreadNow>> threads;
  while (sqlite3_step(s) == SQLITE_ROW) {
    ThreadNow now;
    now.at_ns = uint64_t(sqlite3_column_int64(s, 1));
    now.since_ns = uint64_t(sqlite3_column_int64(s, 2));
    now.python_stack = uint32_t(sqlite3_column_int64(s, 3));
    const auto* state = reinterpret_cast<const char*>(sqlite3_column_text(s, 4));
    now.state = state ? state[0] : char(0);
    now.syscall = sqlite3_column_int64(s, 5);
    threads.emplace_back(uint32_t(sqlite3_column_int64(s, 0)), now);
  }
  sqlite3_finalize(s);
  return threads;
}

void Database::set_fact(int64_t process_id, std::string_view key, std::string_view value) {
  begin_if_needed();
  sqlite3_stmt* s = upsert_fact_;
  static_assert(schema::insert_column_count("process_facts") == 3);
  sqlite3_bind_int64(s, 1, process_id);
  sqlite3_bind_text(s, 2, key.data() ? key.data() : "", int(key.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(s, 3, value.data() ? value.data() : "", int(value.size()), SQLITE_TRANSIENT);
  step_and_reset(db_, s);
}

std::map<std::string, std::string> Database::facts(int64_t process_id) {
  sqlite3_stmt* s = prepare("SELECT key, value FROM process_facts WHERE process_id = ?");
  sqlite3_bind_int64(s, 1, process_id);
  std::map<std::string, std::string> facts;
  while (sqlite3_step(s) == SQLITE_ROW)
    facts[reinterpret_cast<const char*>(sqlite3_column_text(s, 0))] =
        reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
  sqlite3_finalize(s);
  return facts;
}

void Database::add_gpu_activity(int64_t process_id, const StoredEvent& activity) {
  begin_if_needed();
  const EventRecord& r = activity.record;
  const int64_t values[] = {process_id,
                            r.api,
                            int64_t(activity.begin_ns),
                            int64_t(activity.end_ns),
                            gpu_device(r),
                            int64_t(r.stream),
                            int64_t(r.bytes),
                            r.direction,
                            r.host_memory,
                            kernel_name_id(r),
                            int64_t(gpu_correlation(r))};
  static_assert(std::size(values) == schema::insert_column_count("gpu_activities"));
  for (int i = 0; i < int(std::size(values)); ++i) sqlite3_bind_int64(insert_gpu_activity_, i + 1, values[i]);
  step_and_reset(db_, insert_gpu_activity_);
}

uint64_t Database::process_rows(std::string_view table, int64_t process_id) {
  sqlite3_stmt* s = prepare(fmt::format("SELECT count(*) FROM {} WHERE process_id = ?", table).c_str());
  sqlite3_bind_int64(s, 1, process_id);
  uint64_t rows = 0;
  if (sqlite3_step(s) == SQLITE_ROW) rows = uint64_t(sqlite3_column_int64(s, 0));
  sqlite3_finalize(s);
  return rows;
}

uint64_t Database::gpu_activity_rows(int64_t process_id) { return process_rows("gpu_activities", process_id); }

void Database::forget_timings(TimingFolder& folder) {
  for (const int64_t row : folder.clear()) delete_event(row);
}

void Database::restore_timings(int64_t process_id, TimingFolder& folder) {
  // Each side's newest rows, oldest first: as the dead collector held them.
  const auto read = [&](const std::string& condition, const auto& add) {
    sqlite3_stmt* s = prepare(("SELECT * FROM (SELECT rowid, begin_ns, object, stream, sequence, peer, flags, detail "
                               "FROM events WHERE process_id = ? AND " +
                               condition + " ORDER BY rowid DESC LIMIT ?) ORDER BY rowid")
                                  .c_str());
    sqlite3_bind_int64(s, 1, process_id);
    sqlite3_bind_int64(s, 2, int64_t(TimingFolder::kMaxAwaitedTimings));
    while (sqlite3_step(s) == SQLITE_ROW) {
      EventRecord r{};
      r.object = uint64_t(sqlite3_column_int64(s, 2));
      r.stream = uint64_t(sqlite3_column_int64(s, 3));
      r.sequence = uint32_t(sqlite3_column_int64(s, 4));
      r.peer = uint32_t(sqlite3_column_int64(s, 5));
      r.flags = uint32_t(sqlite3_column_int64(s, 6));
      r.detail = uint64_t(sqlite3_column_int64(s, 7));
      add(r, uint64_t(sqlite3_column_int64(s, 1)), sqlite3_column_int64(s, 0));
    }
    sqlite3_finalize(s);
  };
  read(fmt::format("gpu_ns IS NULL AND (flags & {}) = 0 AND api IN (SELECT id FROM apis WHERE class = '{}')",
                   kUntimedCapturing | kUntimedNoEvent, api_class_name(ApiClass::Collective)),
       [&](const EventRecord& r, uint64_t begin_ns, int64_t row) { folder.await(r, begin_ns, row); });
  read(fmt::format("api IN (SELECT id FROM apis WHERE class = '{}')", api_class_name(ApiClass::CollectiveTiming)),
       [&](const EventRecord& r, uint64_t begin_ns, int64_t row) { folder.hold_early(r, begin_ns, row); });
}

void Database::add_calls(int64_t process_id, const CallKey& k, const CallTotals& t) {
  begin_if_needed();
  const int64_t values[] = {process_id,
                            k.api,
                            int64_t(k.direction),
                            int64_t(k.host_memory),
                            k.native_stack,
                            k.python_stack,
                            k.null_object ? 1 : 0,
                            int64_t(k.follows_copy),
                            int64_t(t.count),
                            int64_t(t.bytes),
                            int64_t(t.total_ns),
                            int64_t(t.max_ns),
                            int64_t(t.first_begin_ns),
                            int64_t(t.last_end_ns)};
  static_assert(std::size(values) == schema::insert_column_count("calls"));
  for (int i = 0; i < int(std::size(values)); ++i) sqlite3_bind_int64(upsert_calls_, i + 1, values[i]);
  step_and_reset(db_, upsert_calls_);
}

int64_t Database::add_recent_event(int64_t process_id, const StoredEvent& e) {
  begin_if_needed();
  bind_event(insert_recent_, process_id, e.record, e.begin_ns, e.end_ns, e.follows_copy);
  step_and_reset(db_, insert_recent_);
  return sqlite3_last_insert_rowid(db_);
}

void Database::forget_recent_events(int64_t process_id, int64_t first, int64_t last) {
  begin_if_needed();
  sqlite3_bind_int64(delete_recent_rows_, 1, first);
  sqlite3_bind_int64(delete_recent_rows_, 2, last);
  sqlite3_bind_int64(delete_recent_rows_, 3, process_id);
  step_and_reset(db_, delete_recent_rows_);
}

std::vector<int64_t> Database::recent_event_rowids(int64_t process_id) {
  sqlite3_stmt* s = prepare("SELECT rowid FROM recent_events WHERE process_id = ? ORDER BY rowid");
  sqlite3_bind_int64(s, 1, process_id);
  std::vector<int64_t> rowids;
  while (sqlite3_step(s) == SQLITE_ROW) rowids.push_back(sqlite3_column_int64(s, 0));
  sqlite3_finalize(s);
  return rowids;
}

std::optional<int64_t> Database::find_unended_process(const std::string& segment, const SegmentHeader& h) {
  sqlite3_stmt* s =
      prepare("SELECT id FROM processes WHERE segment = ? AND pid = ? AND start_monotonic_ns = ? AND ended = 0 "
              "ORDER BY id DESC LIMIT 1");
  sqlite3_bind_text(s, 1, segment.c_str(), int(segment.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(s, 2, h.pid);
  sqlite3_bind_int64(s, 3, int64_t(h.anchor_monotonic_ns));
  std::optional<int64_t> id;
  if (sqlite3_step(s) == SQLITE_ROW) id = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  return id;
}

std::map<uint32_t, uint64_t> Database::segment_positions(int64_t process_id) {
  sqlite3_stmt* s = prepare("SELECT ring, position FROM segment_positions WHERE process_id = ?");
  sqlite3_bind_int64(s, 1, process_id);
  std::map<uint32_t, uint64_t> positions;
  while (sqlite3_step(s) == SQLITE_ROW)
    positions[uint32_t(sqlite3_column_int64(s, 0))] = uint64_t(sqlite3_column_int64(s, 1));
  sqlite3_finalize(s);
  return positions;
}

void Database::forget_segment_positions(int64_t process_id) {
  begin_if_needed();
  sqlite3_stmt* s = prepare("DELETE FROM segment_positions WHERE process_id = ?");
  sqlite3_bind_int64(s, 1, process_id);
  const int rc = sqlite3_step(s);
  sqlite3_finalize(s);
  if (rc != SQLITE_DONE) throw std::runtime_error(std::string("database error: ") + sqlite3_errmsg(db_));
}

std::vector<Database::StoredModule> Database::modules(int64_t process_id) {
  sqlite3_stmt* s = prepare("SELECT id, path, base, build_id FROM modules WHERE process_id = ? ORDER BY id");
  sqlite3_bind_int64(s, 1, process_id);
  std::vector<StoredModule> modules;
  while (sqlite3_step(s) == SQLITE_ROW) {
    const auto* path = reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
    const std::string hex_id = reinterpret_cast<const char*>(sqlite3_column_text(s, 3));
    std::string build_id;
    for (std::size_t i = 0; i + 1 < hex_id.size(); i += 2)
      build_id += char(std::stoi(hex_id.substr(i, 2), nullptr, 16));
    modules.push_back({uint32_t(sqlite3_column_int64(s, 0)), path, uint64_t(sqlite3_column_int64(s, 2)), build_id});
  }
  sqlite3_finalize(s);
  return modules;
}

std::vector<StoredEvent> Database::recent_events(int64_t process_id) {
  sqlite3_stmt* s = prepare(
      ("SELECT " + schema::column_list("recent_events") + " FROM recent_events WHERE process_id = ? ORDER BY rowid")
          .c_str());
  sqlite3_bind_int64(s, 1, process_id);
  std::vector<StoredEvent> events;
  while (sqlite3_step(s) == SQLITE_ROW) {
    const auto at = [&](int i) { return sqlite3_column_int64(s, i); };
    StoredEvent e{};
    EventRecord& r = e.record;
    // In schema.def's order (bind_event).
    r.tid = uint32_t(at(1));
    r.api = uint16_t(at(2));
    e.begin_ns = uint64_t(at(3));
    e.end_ns = uint64_t(at(4));
    r.bytes = uint64_t(at(5));
    r.direction = uint8_t(at(6));
    r.host_memory = uint8_t(at(7));
    r.stream = uint64_t(at(8));
    r.object = uint64_t(at(9));
    r.detail = uint64_t(at(10));
    r.rank_in_comm = uint32_t(at(11));
    r.comm_size = uint32_t(at(12));
    r.result = int32_t(at(13));
    r.native_stack = uint32_t(at(14));
    r.python_stack = uint32_t(at(15));
    r.sequence = uint32_t(at(16));
    r.peer = uint32_t(at(17));
    r.flags = uint32_t(at(18));
    e.follows_copy = Direction(at(19));
    events.push_back(e);
  }
  sqlite3_finalize(s);
  return events;
}

void Database::set_segment_position(int64_t process_id, uint32_t ring, uint64_t position) {
  begin_if_needed();
  sqlite3_bind_int64(upsert_position_, 1, process_id);
  sqlite3_bind_int64(upsert_position_, 2, ring);
  sqlite3_bind_int64(upsert_position_, 3, int64_t(position));
  step_and_reset(db_, upsert_position_);
}

namespace {
// The interpreter's version ("3.11", "3.13t") and, when its stacks cannot be read, why.
std::pair<std::string, std::string> python_words(uint32_t word) {
  const int minor = python_stacks_minor(word);
  switch (python_stacks_kind(word)) {
    case PythonStacks::Available:
      return {fmt::format("3.{}", minor), ""};
    case PythonStacks::FreeThreaded:
      return {fmt::format("3.{}t", minor),
              fmt::format("free-threaded CPython 3.{}t: trainshim reads Python stacks of the GIL builds of "
                          "CPython 3.10 to 3.13 only",
                          minor)};
    case PythonStacks::UnsupportedVersion:
      return {fmt::format("3.{}", minor),
              fmt::format("CPython 3.{}: trainshim reads Python stacks of CPython 3.10 to 3.13 (release builds) only",
                          minor)};
    case PythonStacks::Unknown:
    case PythonStacks::NoPython:
      break;
  }
  return {};
}
}  // namespace

void Database::update_process(int64_t process_id, const ProcessCounters& c) {
  begin_if_needed();
  const int64_t values[] = {int64_t(c.events),
#define TS_COUNTER(kind, column, json_key, words, meaning) int64_t(c.column),
#include "trainshim/counters.def"
                            c.ended ? 1 : 0};
  int parameter = 0;
  for (const int64_t value : values) sqlite3_bind_int64(update_process_, ++parameter, value);
  const auto [version, unavailable] = python_words(c.python_stacks);
  sqlite3_bind_text(update_process_, ++parameter, version.c_str(), int(version.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(update_process_, ++parameter, unavailable.c_str(), int(unavailable.size()), SQLITE_TRANSIENT);
  const std::string_view timeline = gpu_timeline_name(GpuTimeline(c.gpu_timeline));
  sqlite3_bind_text(update_process_, ++parameter, timeline.data(), int(timeline.size()), SQLITE_STATIC);
  const std::string_view sampler = sampler_state_name(SamplerState(c.sampler));
  sqlite3_bind_text(update_process_, ++parameter, sampler.data(), int(sampler.size()), SQLITE_STATIC);
  sqlite3_bind_int64(update_process_, ++parameter, c.sample_hz);
  sqlite3_bind_int64(update_process_, ++parameter, process_id);
  step_and_reset(db_, update_process_);
}

Database::ProcessCounters Database::process_counters(int64_t process_id) {
  sqlite3_stmt* s = prepare(("SELECT events, " + counter_columns() + ", ended FROM processes WHERE id = ?").c_str());
  sqlite3_bind_int64(s, 1, process_id);
  ProcessCounters c;
  if (sqlite3_step(s) == SQLITE_ROW) {
    int column = 0;
    c.events = uint64_t(sqlite3_column_int64(s, column++));
#define TS_COUNTER(kind, name, json_key, words, meaning) c.name = uint64_t(sqlite3_column_int64(s, column++));
#include "trainshim/counters.def"
    c.ended = sqlite3_column_int64(s, column) != 0;
  }
  sqlite3_finalize(s);
  return c;
}

namespace {
std::string hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}
void bind_text(sqlite3_stmt* s, int i, const std::string& text) {
  sqlite3_bind_text(s, i, text.c_str(), int(text.size()), SQLITE_TRANSIENT);
}
}  // namespace

void Database::add_module(int64_t process_id, uint32_t id, const std::string& path, uint64_t base,
                          const std::string& build_id) {
  begin_if_needed();
  sqlite3_bind_int64(insert_module_, 1, process_id);
  sqlite3_bind_int64(insert_module_, 2, id);
  bind_text(insert_module_, 3, path);
  sqlite3_bind_int64(insert_module_, 4, int64_t(base));
  bind_text(insert_module_, 5, hex(build_id));
  step_and_reset(db_, insert_module_);
}

void Database::add_native_frame(int64_t process_id, uint32_t stack_id, int depth, const NativeFrame& f) {
  begin_if_needed();
  sqlite3_stmt* s = insert_native_frame_;
  sqlite3_bind_int64(s, 1, process_id);
  sqlite3_bind_int64(s, 2, stack_id);
  sqlite3_bind_int(s, 3, depth);
  sqlite3_bind_int64(s, 4, int64_t(f.address));
  bind_text(s, 5, f.module);
  bind_text(s, 6, f.function);
  bind_text(s, 7, f.file);
  sqlite3_bind_int(s, 8, f.line);
  step_and_reset(db_, s);
}

void Database::add_python_string(int64_t process_id, uint32_t id, const std::string& text) {
  begin_if_needed();
  sqlite3_bind_int64(insert_python_string_, 1, process_id);
  sqlite3_bind_int64(insert_python_string_, 2, id);
  bind_text(insert_python_string_, 3, text);
  step_and_reset(db_, insert_python_string_);
}

std::vector<std::pair<uint32_t, std::string>> Database::python_strings(int64_t process_id) {
  sqlite3_stmt* s = prepare("SELECT id, text FROM python_strings WHERE process_id = ?");
  sqlite3_bind_int64(s, 1, process_id);
  std::vector<std::pair<uint32_t, std::string>> strings;
  while (sqlite3_step(s) == SQLITE_ROW)
    strings.emplace_back(uint32_t(sqlite3_column_int64(s, 0)),
                         reinterpret_cast<const char*>(sqlite3_column_text(s, 1)));
  sqlite3_finalize(s);
  return strings;
}

void Database::add_python_frame(int64_t process_id, uint32_t stack_id, int depth, const std::string& file,
                                const std::string& function, int line, const std::string& source) {
  begin_if_needed();
  sqlite3_stmt* s = insert_python_frame_;
  sqlite3_bind_int64(s, 1, process_id);
  sqlite3_bind_int64(s, 2, stack_id);
  sqlite3_bind_int(s, 3, depth);
  bind_text(s, 4, file);
  bind_text(s, 5, function);
  sqlite3_bind_int(s, 6, line);
  bind_text(s, 7, source);
  step_and_reset(db_, s);
}

std::vector<Database::PythonFrame> Database::python_frames(int64_t process_id, uint32_t stack_id) {
  sqlite3_stmt* s =
      prepare("SELECT file, function, line FROM python_frames WHERE process_id = ? AND stack_id = ? ORDER BY depth");
  sqlite3_bind_int64(s, 1, process_id);
  sqlite3_bind_int64(s, 2, stack_id);
  std::vector<PythonFrame> frames;
  while (sqlite3_step(s) == SQLITE_ROW)
    frames.push_back({reinterpret_cast<const char*>(sqlite3_column_text(s, 0)),
                      reinterpret_cast<const char*>(sqlite3_column_text(s, 1)), sqlite3_column_int(s, 2)});
  sqlite3_finalize(s);
  return frames;
}

void Database::add_python_stack(int64_t process_id, uint32_t stack_id, bool borrowed, uint32_t omitted) {
  begin_if_needed();
  sqlite3_stmt* s = insert_python_stack_;
  sqlite3_bind_int64(s, 1, process_id);
  sqlite3_bind_int64(s, 2, stack_id);
  sqlite3_bind_int(s, 3, borrowed ? 1 : 0);
  sqlite3_bind_int64(s, 4, omitted);
  step_and_reset(db_, s);
}

void Database::record_hang(const std::string& communicator, uint32_t sequence, const std::string& kind,
                           const std::string& op, const std::string& waiting, const std::string& missing,
                           int64_t waited_ns, const std::string& message, const std::string& stacks) {
  begin_if_needed();
  sqlite3_stmt* s = upsert_hang_;
  bind_text(s, 1, communicator);
  sqlite3_bind_int64(s, 2, sequence);
  bind_text(s, 3, kind);
  bind_text(s, 4, op);
  bind_text(s, 5, waiting);
  bind_text(s, 6, missing);
  sqlite3_bind_int64(s, 7, waited_ns);
  bind_text(s, 8, message);
  bind_text(s, 9, stacks);
  sqlite3_bind_int64(s, 10, int64_t(std::time(nullptr)));
  step_and_reset(db_, s);
}

void Database::log(const std::string& level, const std::string& message) {
  begin_if_needed();
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  sqlite3_bind_int64(insert_log_, 1, int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec);
  sqlite3_bind_text(insert_log_, 2, level.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(insert_log_, 3, message.c_str(), -1, SQLITE_TRANSIENT);
  step_and_reset(db_, insert_log_);
}

}  // namespace trainshim::collector
