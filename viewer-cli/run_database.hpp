#pragma once
// Read-only access to a run database, with the checks every command needs first.
#include <sqlite3.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainshim::cli {

// A user-facing error: the message says what was wrong and what to do; exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Statement;

class RunDatabase {
 public:
  // Throws UsageError when the file is missing, is not a regular file, is not a trainshim database, or has a schema
  // version this build does not read.
  explicit RunDatabase(const std::string& path);
  ~RunDatabase();
  RunDatabase(const RunDatabase&) = delete;
  RunDatabase& operator=(const RunDatabase&) = delete;

  const std::string& path() const { return path_; }
  std::string meta(const std::string& key) const;
  sqlite3* handle() const { return db_; }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

// A prepared query; columns read by index.
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
  std::string text(int column) const;

 private:
  const RunDatabase& db_;
  sqlite3_stmt* stmt_ = nullptr;
};

// The newest regular file trainshim-*.db in `directory`, empty if none.
std::string newest_database(const std::string& directory);

}  // namespace trainshim::cli
