// Every command on every kind of database a user may point it at: none crashes; bad input gets a
// message and exit code 2.
#include <gtest/gtest.h>

#include <filesystem>

#include "harness.hpp"

namespace trainshim::test {
namespace {

struct Case {
  std::string name;
  std::string path;
  int expected;              // exit code of `report`
  std::string message_part;  // in the message of a refused database
};

class Robustness : public ::testing::Test {
 protected:
  void SetUp() override {
    good = s.dir + "/good.db";
    ASSERT_EQ(run(trainshim_cli() + " run --no-report --out " + good + " -- " + Paths::programs + "/accounting_prog")
                  .exit_code,
              0);
    empty = s.dir + "/empty.db";
    ASSERT_TRUE(write_empty_database(empty, s.job + "_empty"));
    for (const auto& [name, version] : {std::pair{"older", "5"}, std::pair{"newer", "99"}}) {
      const std::string path = s.dir + "/" + name + ".db";
      std::filesystem::copy_file(good, path);
      ASSERT_EQ(run("sqlite3 " + path + " \"UPDATE meta SET value = '" + version + "' WHERE key = 'schema_version'\"")
                    .exit_code,
                0);
    }
    // What no collector writes (review round 2, §11: `report` printed "-9223372036854775808 ns", or ran
    // for minutes and gigabytes on a million processes or a stack of a million frames).
    const std::pair<const char*, const char*> hostile[] = {
        {"extremes", "UPDATE calls SET total_ns = -9223372036854775808, count = 0, max_ns = 9223372036854775807"},
        {"infinite", "UPDATE calls SET total_ns = 1e999, bytes = 1e999"},
        {"processes", "INSERT INTO processes(segment, pid, host, rank, local_rank, world_size, job, command, "
                      "start_realtime_ns, start_monotonic_ns, ended) WITH RECURSIVE n(i) AS (SELECT 10 UNION ALL "
                      "SELECT i + 1 FROM n WHERE i < 4200) SELECT 'seg' || i, i, host, i, 0, 4200, job, command, "
                      "start_realtime_ns, start_monotonic_ns, 1 FROM n, (SELECT * FROM processes LIMIT 1)"},
        {"deep", "INSERT INTO python_frames WITH RECURSIVE n(depth) AS (SELECT 0 UNION ALL SELECT depth + 1 FROM n "
                 "WHERE depth < 99) SELECT (SELECT id FROM processes LIMIT 1), 999999, depth, 'f.py', 'recurse', "
                 "depth + 1, 'x' FROM n"},
    };
    for (const auto& [name, sql] : hostile) {
      const std::string path = s.dir + "/" + name + ".db";
      std::filesystem::copy_file(good, path);
      ASSERT_EQ(run("sqlite3 " + path + " \"" + sql + "\" 2>&1").exit_code, 0) << name;
    }
    truncated = s.dir + "/truncated.db";
    std::filesystem::copy_file(good, truncated);
    std::filesystem::resize_file(truncated, std::filesystem::file_size(good) / 2);
  }
  Scratch s;
  std::string good, empty, truncated;
};

TEST_F(Robustness, NoCommandCrashesOnAnyDatabase) {
  const std::vector<Case> cases = {
      {"good", good, 0, ""},
      {"empty run", empty, 0, ""},
      {"older version", s.dir + "/older.db", 2,
       "older.db: written by an older trainshim (schema 5); this trainshim reads schema 8 and newer: re-run the job, "
       "or read it with the trainshim that wrote it"},
      {"newer version", s.dir + "/newer.db", 2,
       "(schema 99); this trainshim reads schemas 8 to 8: read it with that "
       "trainshim or a newer one"},
      {"truncated", truncated, 2, "truncated.db"},
      {"missing", s.dir + "/missing.db", 2, "no such database"},
      {"negative sums", s.dir + "/extremes.db", 2,
       "extremes.db: damaged database: calls holds a count, size or time that is negative, not a whole number, or "
       "past 10^18; re-run the job, or pass the database that run wrote"},
      {"infinite sums", s.dir + "/infinite.db", 2, "infinite.db: damaged database: calls holds"},
      {"too many processes", s.dir + "/processes.db", 2,
       "processes, more than the 4096 one launch on one node can have; re-run the job"},
      {"deep stack", s.dir + "/deep.db", 2, "deep.db: damaged database: a Python stack of more than 62 frames"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const auto report = run(trainshim_cli() + " report " + c.path + " 2>&1");
    EXPECT_EQ(report.exit_code, c.expected) << report.out;
    EXPECT_NE(report.out.find(c.message_part), std::string::npos) << report.out;
    const std::vector<std::string> commands = {" report --json ", " audit ", " audit --format junit ",
                                               " diff " + good + " ", " export -o " + s.dir + "/trace.json "};
    for (const std::string& command : commands) {
      const auto r = run(trainshim_cli() + command + c.path + " 2>&1");
      EXPECT_LT(r.exit_code, 3) << command << ": " << r.out;
      if (c.expected == 2) {
        EXPECT_EQ(r.exit_code, 2) << command << ": " << r.out;
      }
    }
  }
}

}  // namespace
}  // namespace trainshim::test
