#pragma once
// Read-only access to a run database, with the checks every command needs first.
#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "errors.hpp"
#include "trainshim/api.hpp"

namespace trainshim::cli {

class Statement;

// The ids of the small lookup tables (apis, directions, host_memories) as this build's words
// (call_kinds.def), read once so that the readers' hot loops compare enums and never build or join
// strings per row.
struct Vocabulary {
  struct ApiWord {
    std::string name = "unknown";       // the function, as the database names it
    std::optional<ApiClass> api_class;  // none: a class this build does not know
  };
  std::vector<ApiWord> apis;              // by id
  std::vector<Direction> directions;      // by id
  std::vector<HostMemory> host_memories;  // by id

  // For an id the table does not hold (or a name this build does not know): name "unknown" and no
  // class; Direction::None; HostMemory::Unknown.
  const ApiWord& api(int64_t id) const;
  Direction direction(int64_t id) const;
  HostMemory host_memory(int64_t id) const;
};

// "('sync', 'free', 'poll')": the names of the classes `keep` selects, for `apis.class IN ...`.
std::string api_classes_sql(bool (*keep)(ApiClass));
std::string api_classes_sql(ApiClass only);

class RunDatabase {
 public:
  // Throws UsageError when the file is missing, is not a regular file, is not a trainshim database, or has a schema
  // version this build does not read (older than kOldestReadableSchema or newer than kSchemaVersion).
  explicit RunDatabase(const std::string& path);
  ~RunDatabase();
  RunDatabase(const RunDatabase&) = delete;
  RunDatabase& operator=(const RunDatabase&) = delete;

  const std::string& path() const { return path_; }
  std::string meta(const std::string& key) const;
  sqlite3* handle() const { return db_; }
  const Vocabulary& vocabulary() const { return vocabulary_; }

 private:
  void check_schema();
  void check_bounds() const;

  std::string path_;
  sqlite3* db_ = nullptr;
  Vocabulary vocabulary_;
};

// A prepared query; columns read by index. Preparing it and step() throw InputError when the
// database turns out damaged or cut short.
class Statement {
 public:
  Statement(const RunDatabase& db, const char* sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& bind(int index, int64_t value);
  Statement& bind(int index, const std::string& value);
  bool step();
  int64_t integer(int column) const;
  bool is_null(int column) const;
  std::string text(int column) const;

 private:
  const RunDatabase& db_;
  sqlite3_stmt* stmt_ = nullptr;
};

// The newest regular file trainshim-*.db in `directory`, empty if none.
std::string newest_database(const std::string& directory);

// Whether the collector stored any process (ended or not) in `db`.
bool holds_a_process(const RunDatabase& db);

}  // namespace trainshim::cli
