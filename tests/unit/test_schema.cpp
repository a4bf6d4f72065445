// The run database's one list (common/trainshim/schema.def) and what is made of it.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>
#include <sstream>
#include <string>

#include "trainshim/schema.hpp"

namespace trainshim::schema {
namespace {

std::string between_markers(const std::string& text) {
  const std::string begin = "<!-- schema:begin -->\n", end = "<!-- schema:end -->\n";
  const auto from = text.find(begin), to = text.find(end);
  if (from == std::string::npos || to == std::string::npos || to < from) return "(markers missing)";
  return text.substr(from + begin.size(), to - from - begin.size());
}

TEST(Schema, DocsDatabaseMdShowsTheSchemaAsDeclared) {
  std::ifstream in(std::string(TRAINSHIM_SOURCE_DIR) + "/docs/database.md");
  ASSERT_TRUE(in) << "docs/database.md not found";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(between_markers(text.str()), markdown()) << "run scripts/update-schema-doc";
}

TEST(Schema, StatementsAreMadeFromTheList) {
  EXPECT_EQ(insert_statement("segment_positions", OnConflict::Merge),
            "INSERT INTO segment_positions(process_id, ring, position) VALUES(?, ?, ?) ON CONFLICT(process_id, ring) "
            "DO UPDATE SET position = excluded.position");
  EXPECT_EQ(insert_statement("calls", OnConflict::Merge),
            "INSERT INTO calls(process_id, api, direction, host_memory, native_stack, python_stack, null_object, "
            "follows_copy, count, bytes, total_ns, max_ns, first_begin_ns, last_end_ns) "
            "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(process_id, api, direction, host_memory, "
            "native_stack, python_stack, null_object, follows_copy) DO UPDATE SET count = count + excluded.count, "
            "bytes = bytes + excluded.bytes, total_ns = total_ns + excluded.total_ns, "
            "max_ns = max(max_ns, excluded.max_ns), first_begin_ns = min(first_begin_ns, excluded.first_begin_ns), "
            "last_end_ns = max(last_end_ns, excluded.last_end_ns)");
  EXPECT_EQ(insert_statement("python_stacks", OnConflict::Ignore),
            "INSERT OR IGNORE INTO python_stacks(process_id, stack_id, borrowed, omitted) VALUES(?, ?, ?, ?)");
  // The database numbers processes; updates fill the counters.
  EXPECT_EQ(insert_statement("processes"),
            "INSERT INTO processes(segment, pid, host, rank, local_rank, world_size, job, command, start_realtime_ns, "
            "start_monotonic_ns) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  // events: the columns of recent_events, then the GPU timing folded into a collective's row.
  EXPECT_EQ(column_list("events"), column_list("recent_events") + ", gpu_ns, exchange");
  EXPECT_EQ(column_count("recent_events"), 20u);
  EXPECT_EQ(insert_parameter("events", "flags"), 19);
  EXPECT_EQ(insert_parameter("events", "gpu_ns"), 21);
  EXPECT_EQ(insert_parameter("events", "exchange"), 22);
  EXPECT_EQ(insert_parameter("processes", "events"), 0) << "filled by updates";
  EXPECT_EQ(insert_statement("python_strings", OnConflict::Ignore),
            "INSERT OR IGNORE INTO python_strings(process_id, id, text) VALUES(?, ?, ?)");
  EXPECT_EQ(column_list("segment_positions", "p."), "p.process_id, p.ring, p.position");
}

TEST(Schema, TheDdlCreatesEveryTableWithItsKey) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  char* error = nullptr;
  ASSERT_EQ(sqlite3_exec(db, create_statements().c_str(), nullptr, nullptr, &error), SQLITE_OK) << error;
  for (const Table& t : kTables) {
    sqlite3_stmt* s = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, ("SELECT " + column_list(t.name) + " FROM " + std::string(t.name)).c_str(), -1, &s,
                                 nullptr),
              SQLITE_OK)
        << t.name << ": " << sqlite3_errmsg(db);
    sqlite3_finalize(s);
  }
  // Two rows with one key are one: the upsert adds.
  const std::string upsert = insert_statement("calls", OnConflict::Merge);
  for (const char* values : {"1,2,1,2,0,0,0,0, 3,300,30,20,1000,2000", "1,2,1,2,0,0,0,0, 2,50,25,15,900,1900"}) {
    std::string sql = upsert;
    sql.replace(sql.find("?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?"), 40, values);
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << error;
  }
  sqlite3_stmt* s = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "SELECT count(*), sum(count), sum(bytes), sum(total_ns), max(max_ns), "
                               "min(first_begin_ns), max(last_end_ns) FROM calls",
                               -1, &s, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  const int64_t expected[] = {1, 5, 350, 55, 20, 900, 2000};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(sqlite3_column_int64(s, i), expected[i]) << "column " << i;
  sqlite3_finalize(s);
  sqlite3_close(db);
}

TEST(Schema, VersionsAreThoseOfTheContract) {
  EXPECT_EQ(kSchemaVersion, 8);
  EXPECT_EQ(kOldestReadableSchema, 8);
  EXPECT_EQ(kWriterVersion, "0.1.0");
}

}  // namespace
}  // namespace trainshim::schema
