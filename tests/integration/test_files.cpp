// The files trainshim opens and writes, the job ids that name them, and what it prints of the
// strings a recording holds (reliability review, sections 7, 11, 15, 16 and 19).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include "harness.hpp"
#include "trainshim/names.hpp"

namespace trainshim::test {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string simrun() { return std::string(Paths::source) + "/scripts/simrun"; }
std::string shim() { return std::string(Paths::bin) + "/libtrainshim.so"; }
std::string python_script(const std::string& name) { return std::string(Paths::source) + "/tests/python/" + name; }

// A collector the shim started exits by itself once the job is gone: wait for every lock of
// the jobs whose id starts with `job_prefix` to go (bounded, a hung collector fails the test).
bool collectors_exit(const std::string& job_prefix) {
  const std::string prefix = "trainshim-" + std::to_string(getuid()) + "-" + job_prefix;
  for (int i = 0; i < 600; ++i) {
    bool held = false;
    for (const auto& entry : fs::directory_iterator(std::string(kShmDir))) {
      const std::string name = entry.path().filename().string();
      held = held || (name.starts_with(prefix) && name.ends_with(".lock"));
    }
    if (!held) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

void exec_sql(const std::string& db, const std::string& sql) {
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(handle, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(handle);
}

std::string query_text(const std::string& db, const std::string& sql) {
  sqlite3* handle = nullptr;
  std::string value = "(none)";
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK &&
      sqlite3_prepare_v2(handle, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW)
    value = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
  return value;
}

struct stat status_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st;
}

// A directory every user may create files in, as /tmp or a group's project directory.
std::string shared_directory(const Scratch& s) {
  share_with_other_users(s);
  const std::string shared = s.dir + "/shared";
  fs::create_directory(shared);
  fs::permissions(shared, fs::perms(01777));
  return shared;
}

// Section 7: the path of a Python frame is whatever the segment says. A FIFO would block the
// collector for ever in open(), /dev/zero would grow one line without end.
TEST(Files, PythonSourcesThatAreNoRegularFilesAreNotReadAndCollectingGoesOn) {
  Scratch s;
  const std::string fifo = s.dir + "/fifo.py";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string wide = s.dir + "/wide.py";
  std::ofstream(wide) << "first line\n" << std::string(10000, 'x') << "\n";
  const std::string script = python_script("named_sources.py");
  // run() sets LD_LIBRARY_PATH for the first command only: python3 needs it for ctypes.
  const auto result = run("cd " + s.dir + " && LD_LIBRARY_PATH=" + std::string(Paths::simcuda) + " " +
                          preload_env(s.job) + " python3 " + script + " " + fifo + " /dev/zero " + wide);
  ASSERT_EQ(result.exit_code, 0) << result.out;
  ASSERT_TRUE(collectors_exit(s.job)) << "the collector is stuck";
  const std::string db = s.dir + "/trainshim-" + s.job + ".db";
  EXPECT_EQ(count_api(db, "cudaDeviceSynchronize"), 3 + 3);
  for (const std::string& file : {fifo, std::string("/dev/zero")}) {
    SCOPED_TRACE(file);
    EXPECT_EQ(query_int(db, "SELECT count(*) FROM python_frames WHERE file = '" + file +
                                "' AND line = 2 AND "
                                "function = 'synchronize' AND source = ''"),
              1);
    EXPECT_EQ(query_int(db, "SELECT count(*) FROM python_frames WHERE file = '" + file + "' AND source != ''"), 0);
  }
  // A line longer than the limit is cut there.
  EXPECT_EQ(query_text(db, "SELECT source FROM python_frames WHERE file = '" + wide + "'"), std::string(4096, 'x'));
  // Real sources are still read, after the frames that were not.
  EXPECT_EQ(query_text(db, "SELECT source FROM python_frames WHERE file = '" + script +
                               "' AND line = " + std::to_string(marked_line(script, "# AFTER"))),
            "check(cuda.cudaDeviceSynchronize(), \"cudaDeviceSynchronize\")  # AFTER");
  EXPECT_EQ(status_of(db).st_mode & 07777, 0600u) << "the database is the owner's only";
}

// Section 11: in a directory others can write, another user plants a link where the database
// will be, to have the run written where they chose (and readable to them).
TEST(Files, DatabaseLinkPlantedByAnotherUserIsRefusedAndTheJobRuns) {
  Scratch s;
  s.segments_left = true;  // its collector refuses the database: the segments wait for `trainshim collect`
  const std::string shared = shared_directory(s);
  const std::string chosen = s.dir + "/chosen_by_another_user.db";
  const std::string db = shared + "/trainshim-" + s.job + ".db";
  ASSERT_EQ(run(as_other_user("ln -s " + chosen + " " + db)).exit_code, 0);
  const auto result = run("cd " + shared + " && TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() +
                          " run --no-report -- " + program("accounting_prog") + " 2>&1");
  EXPECT_EQ(result.exit_code, 0) << result.out;
  EXPECT_NE(result.out.find("refusing the database " + db + ": " + db +
                            " is a symbolic link; remove it, or set "
                            "TRAINSHIM_OUT to a file in a directory only you can write"),
            std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("the collector exited with status 1"), std::string::npos) << result.out;
  EXPECT_FALSE(fs::exists(chosen));
  EXPECT_TRUE(S_ISLNK(status_of(db).st_mode));
}

TEST(Files, DatabaseFileOfAnotherUserIsRefusedAndLeftAsItWas) {
  Scratch s;
  s.segments_left = true;  // its collector refuses the database: the segments wait for `trainshim collect`
  const std::string shared = shared_directory(s);
  const std::string db = shared + "/trainshim-" + s.job + ".db";
  ASSERT_EQ(run(as_other_user("sh -c 'umask 0 && : > " + db + "'")).exit_code, 0);
  ASSERT_EQ(status_of(db).st_mode & 0777, 0666u);
  const auto result = run("cd " + shared + " && TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() +
                          " run --no-report -- " + program("accounting_prog") + " 2>&1");
  EXPECT_EQ(result.exit_code, 0) << result.out;
  EXPECT_NE(result.out.find("refusing the database " + db + ": " + db + " belongs to uid 65534, not to you"),
            std::string::npos)
      << result.out;
  EXPECT_EQ(status_of(db).st_size, 0);
  EXPECT_EQ(status_of(db).st_uid, kOtherUid);
}

// Section 15: torchrun without --rdzv-id names every launch "none". Two launches one after the
// other (the second while the first one's collector still waits for more) are two runs.
TEST(Files, TorchrunLaunchesWithThePlaceholderRunIdAreTwoRuns) {
  Scratch s;
  const std::string launch = "cd " + s.dir + " && TORCHELASTIC_RUN_ID=none LD_PRELOAD=" + shim() + " " + simrun() +
                             " -n 2 -- " + program("accounting_prog");
  ASSERT_EQ(run(launch).exit_code, 0);
  ASSERT_EQ(run(launch).exit_code, 0);
  ASSERT_TRUE(collectors_exit("none"));
  std::vector<std::string> databases;
  for (const std::string& name : files_in(s.dir))
    if (name.starts_with("trainshim-none_") && name.ends_with(".db")) databases.push_back(s.dir + "/" + name);
  ASSERT_EQ(databases.size(), 2u) << "files: " << testing::PrintToString(files_in(s.dir));
  EXPECT_NE(databases[0], databases[1]);
  for (const std::string& db : databases) {
    SCOPED_TRACE(db);
    const auto report = run(trainshim_cli() + " report --json " + db);
    ASSERT_EQ(report.exit_code, 0) << report.out;
    const json doc = json::parse(report.out);
    ASSERT_EQ(doc.at("ranks").size(), 2u);
    EXPECT_EQ(rank_entry(doc, 0).at("rank"), 0);
    EXPECT_EQ(rank_entry(doc, 1).at("rank"), 1);
    EXPECT_EQ(query_text(db, "SELECT value FROM meta WHERE key = 'launch'").rfind("torchrun:/", 0), 0u);
  }
}

// A launch restarted by torchrun (attempt_1) is the same launch: its collector, started again
// after the first one exited idle, adds to the same database. Another launch with the same run
// id gets a database of its own beside it.
TEST(Files, SameLaunchAppendsAndAnotherLaunchOfTheJobGetsItsOwnDatabase) {
  Scratch s;
  const std::string first = s.dir + "/logs/" + s.job + "_first", second = s.dir + "/logs/" + s.job + "_second";
  for (const std::string& dir : {first + "/attempt_0/0", first + "/attempt_1/0", second + "/attempt_0/0"})
    fs::create_directories(dir);
  auto launch = [&](const std::string& attempt_dir) {
    const auto result =
        run("cd " + s.dir + " && TORCHELASTIC_RUN_ID=" + s.job + " TORCHELASTIC_ERROR_FILE=" + attempt_dir +
            "/0/error.json TRAINSHIM_COLLECTOR_IDLE_S=" + kTestCollectorIdleSeconds + " LD_PRELOAD=" + shim() + " " +
            program("accounting_prog"));
    EXPECT_EQ(result.exit_code, 0);
    EXPECT_TRUE(collectors_exit(s.job));
  };
  launch(first + "/attempt_0");
  launch(first + "/attempt_1");
  launch(second + "/attempt_0");
  const std::string db = s.dir + "/trainshim-" + s.job + ".db", other = s.dir + "/trainshim-" + s.job + ".2.db";
  EXPECT_EQ(files_in(s.dir),
            (std::set<std::string>{"logs", "trainshim-" + s.job + ".db", "trainshim-" + s.job + ".2.db"}));
  EXPECT_EQ(query_int(db, "SELECT count(*) FROM processes"), 2);
  EXPECT_EQ(query_int(db, "SELECT count(*) FROM collector_log WHERE message LIKE 'collector % started%'"), 2);
  EXPECT_EQ(query_text(db, "SELECT value FROM meta WHERE key = 'launch'"), "torchrun:" + first);
  EXPECT_EQ(query_int(other, "SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(query_text(other, "SELECT value FROM meta WHERE key = 'launch'"), "torchrun:" + second);
  EXPECT_EQ(count_api(other, "cudaMemcpy"), count_api(db, "cudaMemcpy") / 2);
}

// Review round 2, §7: an earlier trainshim's database (another schema) at the job's default name
// made every collector of a new launch fail, its segments left in /dev/shm. It is no database this
// collector can add to, nor is a file that is no database: both are left as they are, and the
// launch is written beside them.
TEST(Files, AnEarlierTrainshimsDatabaseIsKeptAndTheLaunchWrittenBesideIt) {
  Scratch s;
  const std::string stem = s.dir + "/trainshim-" + s.job;
  std::ofstream(stem + ".db").close();
  exec_sql(stem + ".db", "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES "
                         "('schema_version', '7')");
  std::ofstream(stem + ".2.db") << "notes, not a database\n";
  const auto result = run("cd " + s.dir + " && " + preload_env(s.job) + " " + program("accounting_prog"));
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_TRUE(collectors_exit(s.job));
  EXPECT_EQ(query_text(stem + ".db", "SELECT value FROM meta WHERE key = 'schema_version'"), "7");
  std::ifstream notes(stem + ".2.db");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(notes), std::istreambuf_iterator<char>()),
            "notes, not a database\n");
  EXPECT_EQ(query_int(stem + ".3.db", "SELECT count(*) FROM processes"), 1);
  EXPECT_EQ(query_int(stem + ".3.db", "SELECT ended FROM processes"), 1);
  EXPECT_GT(count_api(stem + ".3.db", "cudaMemcpy"), 0);
  for (const auto& entry : fs::directory_iterator(std::string(kShmDir)))
    EXPECT_EQ(entry.path().filename().string().find(s.job), std::string::npos) << entry.path();
}

// Section 16: the review's hostile database. Source and function carry an OSC title change, a
// screen clear, colours and a byte that is not UTF-8; the command carries colours and Latin-1.
TEST(Files, HostileRecordedStringsKeepJsonXmlAndTheTerminalIntact) {
  Scratch s;
  ASSERT_EQ(run("TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() + " run --no-report --out " + s.db() + " -- python3 " +
                python_script("accounting.py"))
                .exit_code,
            0);
  exec_sql(s.db(), "UPDATE python_frames SET source=CAST(X'1b5d303b70776e65641b5c1b5b324a1b5b33316d6c6f73732e6974656d"
                   "28292026203c2f6661696c7572653e20e9' AS TEXT), function=CAST(X'1b5b356d66756e633c2f3e' AS TEXT)");
  exec_sql(s.db(), "UPDATE processes SET command=CAST(X'1b5b33316d464f52474544e92e62696e' AS TEXT)");
  const std::string cli = trainshim_cli();

  const auto report_json = run(cli + " report --json " + s.db());
  ASSERT_EQ(report_json.exit_code, 0) << report_json.out;
  const json doc = json::parse(report_json.out);
  ASSERT_EQ(doc.at("ranks").size(), 1u);
  EXPECT_EQ(doc.at("ranks")[0].at("command"), "\x1b[31mFORGED\xEF\xBF\xBD.bin");

  const auto text = run(cli + " report " + s.db());
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_EQ(text.out.find('\x1b'), std::string::npos);
  EXPECT_NE(text.out.find("\\x1b[31mFORGED\xEF\xBF\xBD.bin"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("\\x1b]0;pwned\\x1b\\\\x1b[2J\\x1b[31mloss.item()"), std::string::npos) << text.out;

  ASSERT_EQ(run(cli + " audit " + s.db() + " --format junit > " + s.dir + "/junit.xml").exit_code, 0);
  EXPECT_EQ(
      run("xmllint --noout --schema " + std::string(Paths::source) + "/tests/junit/junit.xsd " + s.dir + "/junit.xml")
          .exit_code,
      0);
  for (const char* format : {"text", "markdown"}) {
    const auto audit = run(cli + " audit " + s.db() + " --format " + format);
    EXPECT_EQ(audit.exit_code, 0) << format;
    EXPECT_EQ(audit.out.find('\x1b'), std::string::npos) << format;
  }
  const auto audit_json = run(cli + " audit " + s.db() + " --format json");
  EXPECT_FALSE(json::parse(audit_json.out, nullptr, false).is_discarded()) << audit_json.out;

  // The baseline keeps the pageable copy site (its identity is the hostile source line), and the
  // run passes against its own baseline: the site is found again, not new.
  const std::string baseline = s.dir + "/baseline.json";
  ASSERT_EQ(run(cli + " audit " + s.db() + " --write-baseline " + baseline).exit_code, 0);
  std::ifstream in(baseline);
  const json written = json::parse(in);
  ASSERT_EQ(written.at("sites").size(), 1u);
  EXPECT_EQ(written.at("sites")[0].at("function"), "\x1b[5mfunc</>");
  const auto against = run(cli + " audit " + s.db() + " --baseline " + baseline);
  EXPECT_EQ(against.exit_code, 0) << against.out;

  const auto diff = run(cli + " diff " + s.db() + " " + s.db());
  EXPECT_EQ(diff.exit_code, 0);
  EXPECT_EQ(diff.out.find('\x1b'), std::string::npos);
  EXPECT_FALSE(json::parse(run(cli + " diff --json " + s.db() + " " + s.db()).out, nullptr, false).is_discarded());
}

// Section 19: a finished database is one file, however often it is read.
TEST(Files, AFinishedRunIsOneFileAfterReportsToo) {
  Scratch s;
  ASSERT_EQ(run("cd " + s.dir + " && " + preload_env(s.job) + " " + program("accounting_prog")).exit_code, 0);
  ASSERT_TRUE(collectors_exit(s.job));
  const std::string name = "trainshim-" + s.job + ".db";
  EXPECT_EQ(files_in(s.dir), std::set<std::string>{name});
  for (const std::string& command :
       {std::string(" report"), std::string(" report --json"), " audit " + name, " export -o - " + name}) {
    const auto result = run("cd " + s.dir + " && " + trainshim_cli() + command + " > /dev/null");
    EXPECT_LE(result.exit_code, 1) << command;
  }
  EXPECT_EQ(files_in(s.dir), std::set<std::string>{name});
  EXPECT_EQ(status_of(s.dir + "/" + name).st_mode & 07777, 0600u);
}

// Section 19: `report` without a database takes the newest trainshim-*.db that is a file; a
// FIFO (which would block it for ever) or a directory is passed over, and refused when named.
TEST(Files, ReportWithoutADatabaseTakesTheNewestRegularFile) {
  Scratch s;
  const std::string db = s.dir + "/trainshim-" + s.job + ".db";
  ASSERT_EQ(run(trainshim_cli() + " run --no-report --out " + db + " -- " + program("accounting_prog")).exit_code, 0);
  const std::string fifo = s.dir + "/trainshim-zz_fifo.db", dir = s.dir + "/trainshim-zz_dir.db";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  fs::create_directory(dir);
  const auto newer = fs::last_write_time(db) + std::chrono::hours(1);
  fs::last_write_time(fifo, newer);
  fs::last_write_time(dir, newer);
  const auto report = run("cd " + s.dir + " && " + trainshim_cli() + " report --json");
  ASSERT_EQ(report.exit_code, 0) << report.out;
  EXPECT_EQ(json::parse(report.out).at("ranks").size(), 1u);
  for (const std::string& named : {fifo, dir}) {
    const auto refused = run(trainshim_cli() + " report " + named + " 2>&1");
    EXPECT_EQ(refused.exit_code, 2);
    EXPECT_NE(refused.out.find(named + ": not a regular file; pass the .db file a run wrote"), std::string::npos)
        << refused.out;
  }
}

// Section 19: a link planted where the exporter writes its partial file is not followed.
TEST(Files, ExportDoesNotWriteThroughALinkBesideItsOutput) {
  Scratch s;
  const std::string shared = shared_directory(s);
  ASSERT_EQ(run(trainshim_cli() + " run --no-report --out " + s.db() + " -- " + program("accounting_prog")).exit_code,
            0);
  const std::string victim = s.dir + "/victim.txt", trace = shared + "/trace.json";
  std::ofstream(victim) << "keep\n";
  ASSERT_EQ(run(as_other_user("ln -s " + victim + " " + trace + ".partial")).exit_code, 0);
  const auto exported = run(trainshim_cli() + " export " + s.db() + " -o " + trace);
  ASSERT_EQ(exported.exit_code, 0) << exported.out;
  std::ifstream kept(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(kept), {}), "keep\n");
  std::ifstream written(trace);
  EXPECT_FALSE(json::parse(written, nullptr, false).is_discarded());
  EXPECT_EQ(files_in(shared), (std::set<std::string>{"trace.json", "trace.json.partial"}));
}

}  // namespace
}  // namespace trainshim::test
