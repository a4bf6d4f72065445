#pragma once
// Read-only access to a run database, with the checks every command needs first.
#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <vector>

#include "errors.hpp"

namespace trainshim::cli {

class Statement;

// The ids of the small lookup tables (apis, directions, host_memories) with their names, read once
// so that the readers' hot loops compare integers and never build or join strings per row.
struct Vocabulary {
  std::vector<std::string> api, api_class, direction, host_memory;

  // "unknown" for an id the table does not hold.
  static const std::string& name(const std::vector<std::string>& names, int64_t id);
  // The direction a wait follows ("h2d", ...), "" for 0: it follows no copy.
  const std::string& follows_copy(int64_t id) const;
};

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

}  // namespace trainshim::cli
