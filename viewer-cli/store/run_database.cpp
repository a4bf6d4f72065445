#include "store/run_database.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <charconv>
#include <filesystem>

#include "trainshim/protocol.hpp"
#include "trainshim/schema.hpp"

namespace trainshim::cli {

namespace {

using schema::kOldestReadableSchema;
using schema::kSchemaVersion;

// Each row's words by its id. The ids are enum values (a few dozen): a larger one is damage, not an
// index to grow a table to.
template <class Word>
void load_words(const RunDatabase& db, const char* sql, std::vector<Word>& words, Word unknown,
                void (*read)(const Statement&, Word&)) {
  Statement q(db, sql);
  while (q.step()) {
    const int64_t id = q.integer(0);
    if (id < 0 || id > 65535) continue;
    if (words.size() <= std::size_t(id)) words.resize(std::size_t(id) + 1, unknown);
    read(q, words[std::size_t(id)]);
  }
}

template <class Word>
const Word& word_of(const std::vector<Word>& words, int64_t id, const Word& unknown) {
  return id >= 0 && std::size_t(id) < words.size() ? words[std::size_t(id)] : unknown;
}

}  // namespace

const Vocabulary::ApiWord& Vocabulary::api(int64_t id) const {
  static const ApiWord unknown;
  return word_of(apis, id, unknown);
}

Direction Vocabulary::direction(int64_t id) const { return word_of(directions, id, Direction::None); }

HostMemory Vocabulary::host_memory(int64_t id) const { return word_of(host_memories, id, HostMemory::Unknown); }

std::string api_classes_sql(bool (*keep)(ApiClass)) {
  std::string sql;
  for (uint8_t c = 0; c < kApiClassCount; ++c)
    if (keep(ApiClass(c))) ((sql += sql.empty() ? "('" : ", '") += kApiClassNames[c]) += "'";
  return sql + ")";
}

std::string api_classes_sql(ApiClass only) { return "('" + std::string(api_class_name(only)) + "')"; }

RunDatabase::RunDatabase(const std::string& path) : path_(path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    throw UsageError(fmt::format("{}: no such database; pass the .db file a run wrote "
                                 "(trainshim run writes ./trainshim-<job>.db, or $TRAINSHIM_OUT)",
                                 path));
  // A FIFO would block the open for ever, a directory fails deep inside SQLite.
  if (!S_ISREG(st.st_mode))
    throw UsageError(fmt::format("{}: not a regular file; pass the .db file a run wrote", path));
  // One connection per database, used by one thread at a time: no mutex per call.
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw UsageError(fmt::format("{}: cannot open: {}", path, why));
  }
  sqlite3_busy_timeout(db_, 2000);
  try {
    check_schema();
    check_bounds();
    load_words<Vocabulary::ApiWord>(*this, "SELECT id, name, class FROM apis", vocabulary_.apis, {},
                                    [](const Statement& row, Vocabulary::ApiWord& api) {
                                      api.name = row.text(1);
                                      api.api_class = api_class_named(row.text(2));
                                    });
    load_words<Direction>(
        *this, "SELECT id, name FROM directions", vocabulary_.directions, Direction::None,
        [](const Statement& row, Direction& d) { d = direction_named(row.text(1)).value_or(Direction::None); });
    load_words<HostMemory>(
        *this, "SELECT id, name FROM host_memories", vocabulary_.host_memories, HostMemory::Unknown,
        [](const Statement& row, HostMemory& m) { m = host_memory_named(row.text(1)).value_or(HostMemory::Unknown); });
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

void RunDatabase::check_schema() {
  std::string version;
  try {
    version = meta("schema_version");
  } catch (const std::exception& e) {
    throw UsageError(fmt::format("{}: not a trainshim database, or damaged ({}); "
                                 "point at the file a trainshim run wrote",
                                 path_, e.what()));
  }
  int schema = 0;
  const auto [end, error] = std::from_chars(version.data(), version.data() + version.size(), schema);
  if (version.empty() || error != std::errc() || end != version.data() + version.size())
    throw UsageError(fmt::format("{}: not a trainshim database (schema version '{}'); "
                                 "point at the file a trainshim run wrote",
                                 path_, version));
  if (schema < kOldestReadableSchema)
    throw UsageError(fmt::format("{}: written by an older trainshim (schema {}); this trainshim reads schema {} and "
                                 "newer: re-run the job, or read it with the trainshim that wrote it",
                                 path_, schema, kOldestReadableSchema));
  if (schema > kSchemaVersion) {
    const std::string writer = meta("writer_version");
    throw UsageError(fmt::format("{}: written by a newer trainshim{} (schema {}); this trainshim reads schemas {} to "
                                 "{}: read it with that trainshim or a newer one",
                                 path_, writer.empty() ? "" : " " + writer, schema, kOldestReadableSchema,
                                 kSchemaVersion));
  }
}

// What no collector writes, checked before anything is loaded: a database holding it was damaged or
// made by hand, and reading it would print nonsense or take minutes and gigabytes.
void RunDatabase::check_bounds() const {
  constexpr int64_t kMostProcesses = 4096;  // of one launch on one node: its ranks, their children, restarts
  constexpr const char* kMostSum = "1000000000000000000";  // 10^18: 31 years of nanoseconds, an exabyte
  const auto damaged = [&](const std::string& what) {
    throw InputError(
        fmt::format("{}: damaged database: {}; re-run the job, or pass the database that run wrote", path_, what));
  };
  Statement processes(*this, "SELECT COUNT(*) FROM processes");
  if (processes.step() && processes.integer(0) > kMostProcesses)
    damaged(fmt::format("{} processes, more than the {} one launch on one node can have", processes.integer(0),
                        kMostProcesses));
  const std::string sums = std::string("SELECT 1 FROM calls WHERE typeof(count) != 'integer' OR typeof(bytes) != "
                                       "'integer' OR typeof(total_ns) != 'integer' OR typeof(max_ns) != 'integer' "
                                       "OR count < 0 OR bytes < 0 OR total_ns < 0 OR max_ns < 0 OR max_ns > total_ns "
                                       "OR count > ") +
                           kMostSum + " OR bytes > " + kMostSum + " OR total_ns > " + kMostSum + " LIMIT 1";
  if (Statement(*this, sums.c_str()).step())
    damaged("calls holds a count, size or time that is negative, not a whole number, or past 10^18");
  Statement frames(*this, "SELECT 1 FROM python_frames GROUP BY process_id, stack_id HAVING COUNT(*) > ? LIMIT 1");
  frames.bind(1, int64_t{kMaxPythonFrames});
  if (frames.step()) damaged(fmt::format("a Python stack of more than {} frames", kMaxPythonFrames));
}

RunDatabase::~RunDatabase() { sqlite3_close(db_); }

std::string RunDatabase::meta(const std::string& key) const {
  Statement s(*this, "SELECT value FROM meta WHERE key = ?");
  s.bind(1, key);
  return s.step() ? s.text(0) : std::string();
}

Statement::Statement(const RunDatabase& db, const char* sql) : db_(db) {
  if (sqlite3_prepare_v2(db.handle(), sql, -1, &stmt_, nullptr) != SQLITE_OK)
    throw InputError(fmt::format("{}: damaged or incomplete database: {}", db.path(), sqlite3_errmsg(db.handle())));
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement& Statement::bind(int index, const std::string& value) {
  sqlite3_bind_text(stmt_, index, value.c_str(), -1, SQLITE_TRANSIENT);
  return *this;
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw InputError(fmt::format("{}: damaged database: {}", db_.path(), sqlite3_errmsg(db_.handle())));
}

int64_t Statement::integer(int column) const { return sqlite3_column_int64(stmt_, column); }

bool Statement::is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

std::string Statement::text(int column) const {
  const auto* t = sqlite3_column_text(stmt_, column);
  return t ? reinterpret_cast<const char*>(t) : "";
}

std::string newest_database(const std::string& directory) {
  namespace fs = std::filesystem;
  std::string best;
  fs::file_time_type best_time{};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("trainshim-") || !name.ends_with(".db") || !entry.is_regular_file(ec)) continue;
    const auto t = entry.last_write_time(ec);
    if (best.empty() || t > best_time) {
      best = entry.path().string();
      best_time = t;
    }
  }
  return best;
}

bool holds_a_process(const RunDatabase& db) {
  Statement processes(db, "SELECT 1 FROM processes LIMIT 1");
  return processes.step();
}

}  // namespace trainshim::cli
