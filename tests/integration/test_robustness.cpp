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
    ASSERT_EQ(run(trainshim_cli() + " run --no-report --out " + empty + " -- true").exit_code, 0);
    for (const auto& [name, version] : {std::pair{"older", "5"}, std::pair{"newer", "99"}}) {
      const std::string path = s.dir + "/" + name + ".db";
      std::filesystem::copy_file(good, path);
      ASSERT_EQ(run("sqlite3 " + path + " \"UPDATE meta SET value = '" + version + "' WHERE key = 'schema_version'\"")
                    .exit_code,
                0);
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
