#pragma once
// The run database the collector writes and every CLI command reads. Schema: docs/database.md.
#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "trainshim/protocol.hpp"

namespace trainshim::collector {

inline constexpr int kSchemaVersion = 1;

class Database {
 public:
  // Creates the file and schema, or opens an existing database of this job to add to it.
  // Throws std::runtime_error with a message that says what to do.
  explicit Database(const std::string& path, const std::string& job);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  int64_t add_process(const std::string& segment, const SegmentHeader& header);
  void add_event(int64_t process_id, const EventRecord& record, uint64_t begin_ns, uint64_t end_ns);

  struct ProcessCounters {
    uint64_t events = 0, dropped_ring_full = 0, dropped_not_ready = 0, lost_unpublished = 0, malformed = 0;
    bool ended = false;
  };
  void update_process(int64_t process_id, const ProcessCounters& counters);
  void log(const std::string& level, const std::string& message);

  // Writes are grouped in transactions; commit makes them visible to readers.
  void commit();

 private:
  void exec(const char* sql);
  void begin_if_needed();
  sqlite3_stmt* prepare(const char* sql);

  sqlite3* db_ = nullptr;
  sqlite3_stmt* insert_event_ = nullptr;
  sqlite3_stmt* insert_process_ = nullptr;
  sqlite3_stmt* update_process_ = nullptr;
  sqlite3_stmt* insert_log_ = nullptr;
  bool in_transaction_ = false;
};

}  // namespace trainshim::collector
