#pragma once
// Rows of `gpu_activities` (what the collector stores of CUPTI's activity records) written into a
// run database by hand, for the tests of what the CLI reads of them. Written through a connection
// of its own, after the collector's Database has committed.
#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainshim/api.hpp"

namespace trainshim::test {

struct GpuRow {
  Api api = Api::gpuKernel;
  int64_t start_ns = 0, end_ns = 0;
  uint32_t device = 0;
  uint64_t stream = 0;
  uint64_t bytes = 0;
  Direction direction = Direction::None;
  HostMemory host_memory = HostMemory::Unknown;
  std::string name = {};  // kernels: stored in python_strings, the row refers to it by id
  uint64_t correlation = 0;
};

// Adds `rows` to the process with row id `process_id`, or, with `process_id` < 0, to the process of
// rank `rank`; its `gpu_timeline`, when not started, becomes "on" (the shim records only then).
inline void add_gpu_rows(const std::string& path, int64_t process_id, const std::vector<GpuRow>& rows, int rank = -1) {
  sqlite3* db = nullptr;
  auto check = [&](int rc) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
      throw std::runtime_error("gpu rows: " + std::string(sqlite3_errmsg(db)));
  };
  check(sqlite3_open(path.c_str(), &db));
  auto one_integer = [&](const std::string& sql) {
    sqlite3_stmt* q = nullptr;
    check(sqlite3_prepare_v2(db, sql.c_str(), -1, &q, nullptr));
    const int64_t value = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int64(q, 0) : -1;
    sqlite3_finalize(q);
    return value;
  };
  if (process_id < 0) process_id = one_integer("SELECT id FROM processes WHERE rank = " + std::to_string(rank));
  int64_t next_string = one_integer("SELECT coalesce(max(id), 0) + 1 FROM python_strings WHERE process_id = " +
                                    std::to_string(process_id));
  check(sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr));
  sqlite3_stmt *row = nullptr, *text = nullptr;
  check(sqlite3_prepare_v2(db,
                           "INSERT INTO gpu_activities (process_id, api, start_ns, end_ns, device, stream, bytes, "
                           "direction, host_memory, name, correlation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           -1, &row, nullptr));
  check(
      sqlite3_prepare_v2(db, "INSERT INTO python_strings (process_id, id, text) VALUES (?, ?, ?)", -1, &text, nullptr));
  std::map<std::string, int64_t> name_ids;  // one id per name, as the shim publishes each name once
  for (const GpuRow& r : rows) {
    int64_t name_id = 0;
    if (auto [it, fresh] = name_ids.try_emplace(r.name, next_string); !r.name.empty() && fresh) {
      name_id = next_string++;
      sqlite3_bind_int64(text, 1, process_id);
      sqlite3_bind_int64(text, 2, name_id);
      sqlite3_bind_text(text, 3, r.name.c_str(), -1, SQLITE_TRANSIENT);
      check(sqlite3_step(text));
      sqlite3_reset(text);
    } else if (!r.name.empty()) {
      name_id = it->second;
    }
    const int64_t values[] = {process_id,       int64_t(r.api),        r.start_ns,
                              r.end_ns,         int64_t(r.device),     int64_t(r.stream),
                              int64_t(r.bytes), int64_t(r.direction),  int64_t(r.host_memory),
                              name_id,          int64_t(r.correlation)};
    for (int i = 0; i < 11; ++i) sqlite3_bind_int64(row, i + 1, values[i]);
    check(sqlite3_step(row));
    sqlite3_reset(row);
  }
  sqlite3_finalize(row);
  sqlite3_finalize(text);
  check(sqlite3_exec(
      db,
      ("UPDATE processes SET gpu_timeline = 'on' WHERE gpu_timeline = '' AND id = " + std::to_string(process_id))
          .c_str(),
      nullptr, nullptr, nullptr));
  check(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr));
  sqlite3_close(db);
}

}  // namespace trainshim::test
