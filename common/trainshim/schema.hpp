#pragma once
// The run database's contract between the collector (writes) and the CLI (reads): the schema
// version, the oldest version the CLI reads, and the tables of schema.def with the SQL and the
// documentation made from them.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "trainshim/version.hpp"

namespace trainshim::schema {

// Bumped whenever a table or a column is added, removed or changes meaning.
inline constexpr int kSchemaVersion = 8;
// The CLI reads databases of kOldestReadableSchema..kSchemaVersion and refuses older ones.
inline constexpr int kOldestReadableSchema = 8;
// meta.writer_version: CMake's project VERSION.
inline constexpr std::string_view kWriterVersion = kTrainshimVersion;

enum class Role : uint8_t { Id, Key, Value, Replace, Sum, Min, Max };

// hangs.kind: a collective some ranks never entered, or no rank progressing with none pending.
enum class HangKind : uint8_t { Collective, NoProgress };
inline constexpr std::string_view hang_kind_name(HangKind kind) {
  return kind == HangKind::Collective ? "collective" : "no_progress";
}
// nullopt for a word this build does not know.
inline constexpr std::optional<HangKind> hang_kind_named(std::string_view name) {
  if (name == hang_kind_name(HangKind::Collective)) return HangKind::Collective;
  if (name == hang_kind_name(HangKind::NoProgress)) return HangKind::NoProgress;
  return std::nullopt;
}

struct Table {
  std::string_view name, row;
};
struct Column {
  std::string_view table, name, type;
  Role role;
  std::string_view meaning;
};
struct Index {
  std::string_view table, name, columns;
};

inline constexpr Table kTables[] = {
#define TS_TABLE(table, row) {#table, row},
#include "trainshim/schema.def"
};
inline constexpr Column kColumns[] = {
#define TS_COLUMN(table, column, type, role, meaning) {#table, #column, type, Role::role, meaning},
#include "trainshim/schema.def"
};
inline constexpr Index kIndexes[] = {
#define TS_INDEX(table, index, columns) {#table, #index, columns},
#include "trainshim/schema.def"
};

inline constexpr std::size_t column_count(std::string_view table) {
  std::size_t n = 0;
  for (const Column& c : kColumns) n += c.table == table;
  return n;
}

// A column with a DEFAULT is filled in by updates, an Id by the database: inserts leave both out.
inline constexpr bool inserted(const Column& c) {
  return c.role != Role::Id && c.type.find("DEFAULT") == std::string_view::npos;
}

inline constexpr std::size_t insert_column_count(std::string_view table) {
  std::size_t n = 0;
  for (const Column& c : kColumns) n += c.table == table && inserted(c);
  return n;
}

// The 1-based parameter of `column` in insert_statement(table); 0 when it is not inserted.
inline constexpr int insert_parameter(std::string_view table, std::string_view column) {
  int n = 0;
  for (const Column& c : kColumns) {
    if (c.table != table || !inserted(c)) continue;
    ++n;
    if (c.name == column) return n;
  }
  return 0;
}

// "a, b, c": every column of `table` in declared order, for SELECTs.
inline std::string column_list(std::string_view table, std::string_view prefix = {}) {
  std::string out;
  for (const Column& c : kColumns) {
    if (c.table != table) continue;
    if (!out.empty()) out += ", ";
    (out += prefix) += c.name;
  }
  return out;
}

inline std::string create_statements() {
  std::string sql;
  for (const Table& t : kTables) {
    ((sql += "CREATE TABLE IF NOT EXISTS ") += t.name) += "(";
    std::string keys;
    bool first = true;
    for (const Column& c : kColumns) {
      if (c.table != t.name) continue;
      ((((sql += first ? "\n  " : ",\n  ") += c.name) += ' ') += c.type);
      if (c.role == Role::Id) sql += " PRIMARY KEY";
      if (c.role == Role::Key) (keys += keys.empty() ? "" : ", ") += c.name;
      first = false;
    }
    if (!keys.empty()) ((sql += ",\n  PRIMARY KEY(") += keys) += ")";
    sql += ");\n";
  }
  for (const Index& i : kIndexes)
    ((((((sql += "CREATE INDEX IF NOT EXISTS ") += i.name) += " ON ") += i.table) += "(") += i.columns) += ");\n";
  return sql;
}

enum class OnConflict : uint8_t {
  Fail,    // a plain INSERT
  Ignore,  // the row already there stays
  Merge,   // Replace / Sum / Min / Max columns merged into the row already there (an UPSERT)
};

// The INSERT of `table` with one parameter per inserted column, in declared order.
inline std::string insert_statement(std::string_view table, OnConflict on_conflict = OnConflict::Fail) {
  std::string sql = on_conflict == OnConflict::Ignore ? "INSERT OR IGNORE INTO " : "INSERT INTO ";
  std::string columns, values, keys, merge;
  for (const Column& c : kColumns) {
    if (c.table != table) continue;
    if (c.role == Role::Key) (keys += keys.empty() ? "" : ", ") += c.name;
    if (!inserted(c)) continue;
    (columns += columns.empty() ? "" : ", ") += c.name;
    values += values.empty() ? "?" : ", ?";
    const std::string name(c.name), excluded = "excluded." + name;
    std::string merged;
    switch (c.role) {
      case Role::Replace:
        merged = excluded;
        break;
      case Role::Sum:
        merged = name + " + " + excluded;
        break;
      case Role::Min:
        merged = "min(" + name + ", " + excluded + ")";
        break;
      case Role::Max:
        merged = "max(" + name + ", " + excluded + ")";
        break;
      case Role::Id:
      case Role::Key:
      case Role::Value:
        continue;
    }
    ((((merge += merge.empty() ? "" : ", ") += name) += " = ") += merged);
  }
  ((((((sql += table) += "(") += columns) += ") VALUES(") += values) += ")");
  if (on_conflict == OnConflict::Merge)
    ((((sql += " ON CONFLICT(") += keys) += ") DO ") += merge.empty() ? "NOTHING" : "UPDATE SET ") += merge;
  return sql;
}

inline std::string_view role_text(Role r) {
  switch (r) {
    case Role::Id:
      return "id";
    case Role::Key:
      return "key";
    case Role::Sum:
      return "sum";
    case Role::Min:
      return "min";
    case Role::Max:
      return "max";
    case Role::Value:
    case Role::Replace:
      break;
  }
  return "";
}

// The part of docs/database.md between `<!-- schema:begin -->` and `<!-- schema:end -->`
// (scripts/update-schema-doc writes it there; a unit test compares).
inline std::string markdown() {
  const std::string version = std::to_string(kSchemaVersion);
  std::string md = "# The run database (schema version " + version + ")\n\n";
  md += "One SQLite file per launch of a job and node, mode 0600, written by `trainshim-collector` (WAL mode while "
        "it writes, so it can be read while the job runs; journal mode DELETE once it exits, so a finished run is one "
        "file), read by every `trainshim` command.\n\n";
  md += "`meta.schema_version` is " + version +
        "; `meta.writer_version` is the version of the trainshim that wrote "
        "the database. The version goes up whenever a table or a column is added, removed or changes meaning. "
        "`trainshim` reads schema versions " +
        std::to_string(kOldestReadableSchema) + " to " + version +
        " (`kOldestReadableSchema` and `kSchemaVersion` in `common/trainshim/schema.hpp`) and refuses any other "
        "with a message naming both versions; a collector adds only to a database of its own version.\n\n";
  md += "Generated from `common/trainshim/schema.def` by `scripts/update-schema-doc`. Role: `key` columns make the "
        "primary key; the collector adds to an existing `calls` row, summing `sum` columns and keeping the smaller "
        "`min` and the larger `max`.\n";
  for (const Table& t : kTables) {
    ((((md += "\n## `") += t.name) += "`: ") += t.row) += "\n\n| column | type | role | meaning |\n|---|---|---|---|\n";
    for (const Column& c : kColumns) {
      if (c.table != t.name) continue;
      const std::string_view type = c.type.substr(0, c.type.find(' '));
      ((((((((md += "| `") += c.name) += "` | ") += type) += " | ") += role_text(c.role)) += " | ") += c.meaning) +=
          " |\n";
    }
  }
  return md;
}

}  // namespace trainshim::schema
