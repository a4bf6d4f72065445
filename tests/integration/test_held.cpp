// The rows of the reliability review's "What held up" table, kept as tests so that they stay held.
// Each test names the row it keeps. The hammering runs use the stub runtime (tests/bench/stub),
// whose calls return at once, so what is loaded is the shim and the collector.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "harness.hpp"

namespace trainshim::test {
namespace {

namespace fs = std::filesystem;

std::string held() { return program("held_prog"); }
std::string shim() { return std::string(Paths::bin) + "/libtrainshim.so"; }
std::string collector() { return std::string(Paths::bin) + "/trainshim-collector"; }
std::string stub_cudart() { return std::string(Paths::stub_cudart) + "/libcudart.so.13"; }

// `text` as one word for /bin/sh, whatever it holds.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string query_text(const std::string& db, const std::string& sql) {
  sqlite3* handle = nullptr;
  std::string value = "<no row>";
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(handle, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW) {
      const auto* text = sqlite3_column_text(stmt, 0);
      value = text ? reinterpret_cast<const char*>(text) : "<null>";
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(handle);
  return value;
}

void write_file(const std::string& path, const std::string& bytes, mode_t mode = 0600) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), ssize_t(bytes.size())) << path;
  close(fd);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Names in /dev/shm that start with `prefix`.
std::vector<std::string> shm_entries(const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    if (e.path().filename().string().starts_with(prefix)) names.push_back(e.path().filename().string());
  return names;
}

void remove_shm_entries(const std::string& prefix) {
  for (const std::string& name : shm_entries(prefix)) fs::remove("/dev/shm/" + name);
}

std::string own_prefix(const std::string& job) { return "trainshim-" + std::to_string(getuid()) + "-" + job + "-"; }
std::string lock_of(const std::string& job) {
  return "/dev/shm/trainshim-" + std::to_string(getuid()) + "-" + job + ".lock";
}

// Polls (bounded) until `done` holds; the answer is whether it did.
template <class Done>
bool eventually(Done done, int tenths_of_a_second = 150) {
  for (int i = 0; i < tenths_of_a_second; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

int64_t lost(const std::string& db) {
  return query_int(db,
                   "SELECT sum(dropped_ring_full + dropped_not_ready + lost_unpublished + malformed) FROM processes");
}

// Row "Segment creation: ... 16 names pre-created by nobody": after 16 collisions, recording is off
// with a message and the job runs.
TEST(HeldUp, SixteenSegmentNamesTakenByAnotherUserTurnRecordingOffWithAMessage) {
  Scratch s;
  share_with_other_users(s);
  // The script's pid is the job's pid after `exec`: it takes every name the shim would try.
  std::string take = "for suffix in ''";
  for (int i = 1; i < 16; ++i) take += " ." + std::to_string(i);
  take += "; do " + as_other_user("sh -c \": > /dev/shm/" + own_prefix(s.job) + "$$$suffix\"") + "; done\n";
  write_file(s.dir + "/job.sh", take + "exec env " + preload_env(s.job) + " \"$@\"\n", 0755);
  const auto result = run(s.dir + "/job.sh " + held() + " segments 2>&1");
  EXPECT_EQ(result.exit_code, 0) << result.out;
  EXPECT_NE(result.out.find("File exists"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("recording is off"), std::string::npos) << result.out;
  // The other user's 16 files are untouched, and the shim created none of its own.
  int foreign = 0;
  for (const std::string& line : lines_of(result.out))
    if (line.starts_with(own_prefix(s.job))) {
      EXPECT_NE(line.find(" size=0 uid=" + std::to_string(kOtherUid) + " link=0"), std::string::npos) << line;
      ++foreign;
    }
  EXPECT_EQ(foreign, 16) << result.out;
  EXPECT_EQ(shm_entries(own_prefix(s.job)).size(), 16u);
  EXPECT_FALSE(fs::exists(lock_of(s.job)));
  remove_shm_entries(own_prefix(s.job));
}

// Row "Segment creation: mode, O_EXCL, symlinks at the segment name": a name another user holds
// (a file, a symlink) is neither opened nor followed; the segment the shim creates is 0600.
TEST(HeldUp, NameTakenByAnotherUserIsNeitherOpenedNorFollowed) {
  Scratch s;
  share_with_other_users(s);
  const std::string target = s.dir + "/created_through_the_link";
  const std::string name = "/dev/shm/" + own_prefix(s.job) + "$$";
  write_file(s.dir + "/job.sh",
             as_other_user("sh -c \"umask 0; : > " + name + "; ln -s " + target + " " + name + ".1\"") + "\nexec env " +
                 preload_env(s.job) + " TRAINSHIM_SPAWN_COLLECTOR=0 \"$@\"\n",
             0755);
  const auto result = run(s.dir + "/job.sh " + held() + " segments");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  const auto lines = lines_of(result.out);
  ASSERT_EQ(lines.size(), 3u) << result.out;
  const std::string other = " uid=" + std::to_string(kOtherUid);
  int file = 0, link = 0, own = 0;
  for (const std::string& line : lines) {
    if (line.find(" mode=666 size=0" + other + " link=0") != std::string::npos) ++file;
    if (line.find(other + " link=1") != std::string::npos && line.find(".1 ") != std::string::npos) ++link;
    if (line.find(".2 mode=600 ") != std::string::npos && line.find(" uid=0 link=0") != std::string::npos &&
        line.find(" size=0 ") == std::string::npos)
      ++own;
  }
  EXPECT_EQ(file, 1) << result.out;
  EXPECT_EQ(link, 1) << result.out;
  EXPECT_EQ(own, 1) << "the shim's segment is the third name, owner-only: " << result.out;
  EXPECT_FALSE(fs::exists(fs::symlink_status(target))) << "the symlink was followed";
  remove_shm_entries(own_prefix(s.job));
}

// Row "Header validation at open: randomly mutated real segments through the real
// trainshim-collector": every collector exits 0, none crashes or hangs.
TEST(HeldUp, MutatedRealSegmentsNeverCrashTheCollector) {
  Scratch s;
  const std::string seed_job = s.job + "seed";
  const auto seeded = run(preload_env(seed_job) +
                          " TRAINSHIM_SPAWN_COLLECTOR=0 TRAINSHIM_RINGS=2 TRAINSHIM_RING_EVENTS=64 "
                          "TRAINSHIM_FIRST_RING_EVENTS=64 TRAINSHIM_SIDE_RECORDS=64 " +
                          held() + " hammer 20 2");
  ASSERT_EQ(seeded.exit_code, 0);
  const auto segments = shm_entries(own_prefix(seed_job));
  ASSERT_EQ(segments.size(), 1u);
  const std::string seed = read_file("/dev/shm/" + segments[0]);
  remove_shm_entries(own_prefix(seed_job));
  ASSERT_GT(seed.size(), 4096u);

  std::mt19937 random(20261130);
  auto below = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(random); };
  const unsigned char special[] = {0, 0xff, 0x7f, 0x80, 1};
  // Each collector symbolizes the seed's stacks (~0.2 s): 50 mutations keep the test short.
  for (int i = 0; i < 50; ++i) {
    SCOPED_TRACE("mutation " + std::to_string(i));
    std::string bytes = seed;
    const std::size_t changes = 1 + below(12);
    for (std::size_t k = 0; k < changes; ++k) {
      // Half of them in the header and the first ring slots, where the structure is.
      const std::size_t at = below(2) == 0 ? below(2048) : below(bytes.size());
      bytes[at] = char(below(10) < 3 ? special[below(5)] : below(256));
    }
    const std::string job = s.job + "m" + std::to_string(i);
    write_file("/dev/shm/" + own_prefix(job) + "1", bytes);
    const auto collected = run("timeout 20 " + collector() + " --job " + job + " --out " + s.dir +
                               "/mutated.db --exit-when-idle 0.05 --poll-ms 5 2>&1");
    EXPECT_EQ(collected.exit_code, 0) << collected.out;
    remove_shm_entries(own_prefix(job));
    fs::remove(lock_of(job));
  }
}

// Row "Collector launch: posix_spawn, no shell; LD_PRELOAD entries naming trainshim removed;
// DEBUGINFOD_URLS unset". A probe preloaded next to the shim writes down every process that
// loads it; the collector's path is full of shell syntax that would run if a shell read it.
TEST(HeldUp, CollectorStartsWithoutAShellWithoutTheShimAndWithoutDebuginfod) {
  Scratch s;
  // Copied: an LD_PRELOAD entry whose path names trainshim would be removed with the shim's.
  const std::string probe = s.dir + "/envprobe.so";
  fs::copy_file(program("libheld_env_probe.so"), probe);
  const std::string odd_dir = s.dir + "/a;touch pwned;b $(touch pwned2)";
  fs::create_directories(odd_dir);
  fs::create_symlink(collector(), odd_dir + "/trainshim-collector");
  fs::create_directories(s.dir + "/probe");
  const auto result =
      run("cd " + s.dir + " && HELD_PROBE_DIR=" + s.dir +
          "/probe DEBUGINFOD_URLS=http://127.0.0.1:9/ "
          "TRAINSHIM_JOB=" +
          s.job + " TRAINSHIM_OUT=" + s.db() + " TRAINSHIM_COLLECTOR=" + quoted(odd_dir + "/trainshim-collector") +
          " TRAINSHIM_COLLECTOR_IDLE_S=" + kTestCollectorIdleSeconds + " LD_PRELOAD=" + probe + ":" + shim() + " " +
          held() + " hammer 10 1 >" + s.dir + "/job.out 2>&1");
  ASSERT_EQ(result.exit_code, 0);
  ASSERT_EQ(read_file(s.dir + "/job.out"), "done 1 x 10\n");

  // The collector's first process forks the collector and is gone: the one that runs is wanted.
  auto collector_pid = [&]() -> pid_t {
    for (const auto& e : fs::directory_iterator(s.dir + "/probe")) {
      const pid_t pid = pid_t(std::stol(e.path().filename().string()));
      if (read_file(e.path()).find("exe=" + collector() + "\n") != std::string::npos && kill(pid, 0) == 0) return pid;
    }
    return 0;
  };
  ASSERT_TRUE(eventually([&] { return collector_pid() != 0; })) << "the collector never started";
  const pid_t pid = collector_pid();
  ASSERT_EQ(fs::read_symlink("/proc/" + std::to_string(pid) + "/exe"), collector()) << "the collector is gone";
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  const std::string record = s.dir + "/probe/" + std::to_string(pid);
  ASSERT_TRUE(eventually([&] { return read_file(record).find("debuginfod_at_exit=") != std::string::npos; }))
      << read_file(record);
  EXPECT_EQ(read_file(record), "exe=" + collector() + "\npreload=" + probe + "\ndebuginfod_at_exit=unset\n");
  // No shell ran between the job and the collector.
  std::set<std::string> executables;
  for (const auto& e : fs::directory_iterator(s.dir + "/probe")) {
    const std::string text = read_file(e.path());
    executables.insert(text.substr(4, text.find('\n') - 4));
  }
  EXPECT_TRUE(executables.contains(held()));
  for (const std::string& exe : executables)
    for (const char* shell : {"sh", "dash", "bash", "busybox"})
      EXPECT_NE(fs::path(exe).filename(), shell) << "the collector was started through " << exe;
  EXPECT_FALSE(fs::exists(s.dir + "/pwned"));
  EXPECT_FALSE(fs::exists(s.dir + "/pwned2"));
  EXPECT_EQ(count_api(s.db(), "cudaMemcpyAsync"), 10);
}

// Row "Job id with /, .., 300-char paths": sanitized to [A-Za-z0-9_.], at most 100 characters, in
// the segment's name and in the database's.
TEST(HeldUp, HostileJobIdIsSanitizedIntoOneShortName) {
  Scratch s;
  fs::create_directories(s.dir + "/work");
  const std::string raw = "../" + std::string(300, 'j') + "/../x";
  const std::string sanitized = ".._" + std::string(97, 'j');
  const auto recorded =
      run("cd " + s.dir + "/work && TRAINSHIM_SPAWN_COLLECTOR=0 TRAINSHIM_SAMPLE_HZ=0 TRAINSHIM_JOB=" + quoted(raw) +
          " LD_PRELOAD=" + shim() + " " + held() + " segments");
  ASSERT_EQ(recorded.exit_code, 0);
  ASSERT_EQ(lines_of(recorded.out).size(), 1u) << recorded.out;
  EXPECT_TRUE(recorded.out.starts_with(own_prefix(sanitized))) << recorded.out;
  const auto collected =
      run("cd " + s.dir + "/work && " + trainshim_cli() + " collect --job " + quoted(raw) + " --idle-exit 0.2");
  ASSERT_EQ(collected.exit_code, 0);
  const std::string db = s.dir + "/work/trainshim-" + sanitized + ".db";
  ASSERT_TRUE(fs::exists(db));
  EXPECT_EQ(query_text(db, "SELECT value FROM meta WHERE key = 'job'"), sanitized);
  EXPECT_EQ(query_text(db, "SELECT job FROM processes"), sanitized);
  EXPECT_EQ(query_int(db, "SELECT events FROM processes"), 2);
  // Nothing was written outside the working directory.
  std::vector<std::string> outside;
  for (const auto& e : fs::directory_iterator(s.dir))
    if (e.path().filename() != "work") outside.push_back(e.path().filename());
  EXPECT_TRUE(outside.empty()) << outside[0];
  EXPECT_TRUE(shm_entries(own_prefix(sanitized)).empty());
}

// Row "unwritable TRAINSHIM_OUT (/proc/nope/x.db)": the collector says so, the job is unaffected.
TEST(HeldUp, UnwritableOutputGetsACollectorMessageAndTheJobRuns) {
  Scratch s;
  const std::string errors = s.dir + "/stderr";
  const auto result = run("cd " + s.dir + " && TRAINSHIM_OUT=/proc/nope/x.db " + preload_env(s.job) + " " + held() +
                          " hammer 10 1 2>" + errors);
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.out, "done 1 x 10\n");
  EXPECT_TRUE(eventually([&] { return read_file(errors).find("/proc/nope/x.db") != std::string::npos; }))
      << read_file(errors);
  EXPECT_NE(read_file(errors).find("trainshim-collector: cannot open the database /proc/nope/x.db"), std::string::npos)
      << read_file(errors);
  EXPECT_NE(read_file(errors).find("TRAINSHIM_OUT"), std::string::npos) << "no advice: " << read_file(errors);
  EXPECT_TRUE(eventually([&] { return !fs::exists(lock_of(s.job)); }));
  remove_shm_entries(own_prefix(s.job));
}

// Row "64 threads x 2000 x (cudaMemcpyAsync + cudaStreamSynchronize), default rings and
// TRAINSHIM_RING_EVENTS=16": stored + counted losses = 256,000 exactly in both.
TEST(HeldUp, SixtyFourHammeringThreadsAreAccountedExactly) {
  for (const std::string ring_events : {"", "16"}) {
    SCOPED_TRACE("TRAINSHIM_RING_EVENTS=" + ring_events);
    Scratch s;
    // Every record a hooked call's: the sampler's own records (counted as records too) are off.
    const auto result =
        run("TRAINSHIM_JOB=" + s.job + " TRAINSHIM_SAMPLE_HZ=0 TRAINSHIM_RING_EVENTS=" + ring_events + " " +
            trainshim_cli() + " run --no-report --out " + s.db() + " -- " + held() + " hammer 2000 64");
    ASSERT_EQ(result.exit_code, 0);
    EXPECT_EQ(result.out, "done 64 x 2000\n");
    EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes WHERE ended = 1"), 1);
    const int64_t stored = query_int(s.db(), "SELECT events FROM processes");
    EXPECT_EQ(query_int(s.db(), "SELECT sum(count) FROM calls"), stored);
    EXPECT_EQ(stored + lost(s.db()), 256'000);
    if (ring_events == "16") {
      EXPECT_GT(query_int(s.db(), "SELECT dropped_ring_full FROM processes"), 0) << "rings of 16 never filled";
    }
  }
}

// Row "Producer SIGKILL at random times (8 threads hammering)": every process drained, ended=1,
// no collector hang.
TEST(HeldUp, ProducersKilledAtRandomTimesAreAllDrainedAndEnded) {
  Scratch s;
  std::mt19937 random(4711);
  std::string script = "timeout 60 " + trainshim_cli() + " collect --job " + s.job + " --out " + s.db() +
                       " --idle-exit 1 & collector=$!\n";
  for (int i = 0; i < 6; ++i) {
    const int delay_ms = std::uniform_int_distribution<int>(20, 300)(random);
    // The random time counts from the producer's first call, when its segment appears.
    // Small rings: what a killed producer leaves behind is drained quickly.
    script += preload_env(s.job) + " TRAINSHIM_SPAWN_COLLECTOR=0 TRAINSHIM_RING_EVENTS=256 " + held() +
              " hammer 100000000 8 >/dev/null &\n" + "producer=$!; tries=0\n" + "while [ ! -e /dev/shm/" +
              own_prefix(s.job) +
              "$producer ] && [ $tries -lt 1000 ]; do sleep 0.01; "
              "tries=$((tries + 1)); done\n" +
              "sleep " + std::to_string(delay_ms / 1000.0) + "; kill -KILL $producer; wait $producer; echo killed=$?\n";
  }
  script += "wait $collector; echo collector=$?\n";
  write_file(s.dir + "/kill.sh", script);
  const auto result = run("sh " + s.dir + "/kill.sh");
  std::string expected;
  for (int i = 0; i < 6; ++i) expected += "killed=137\n";
  EXPECT_EQ(result.out, expected + "collector=0\n");
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes"), 6);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes WHERE ended = 1 AND events > 0"), 6);
  EXPECT_TRUE(shm_entries(own_prefix(s.job)).empty());
  EXPECT_FALSE(fs::exists(lock_of(s.job)));
}

// Row "fork without exec (200 forks while 4 threads hammer)": the children's events exactly
// counted, the parent's calls all stored or counted. 50 forks: the collector symbolizes each
// child's stacks apart (~90 ms a process), 200 would take 18 s.
TEST(HeldUp, ForkWhileThreadsHammerCountsEveryChildsEvents) {
  Scratch s;
  // Every record a hooked call's: the sampler's own records (counted as records too) are off.
  const auto result =
      run("TRAINSHIM_JOB=" + s.job + " TRAINSHIM_SAMPLE_HZ=0 TRAINSHIM_RINGS=1 TRAINSHIM_RING_EVENTS=1024 " +
          trainshim_cli() + " run --no-report --out " + s.db() + " -- " + held() + " fork 50");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  long parent_calls = 0;
  int clean = 0, parent = 0;
  ASSERT_EQ(
      std::sscanf(result.out.c_str(), "clean_children=%d parent_calls=%ld pid=%d", &clean, &parent_calls, &parent), 3)
      << result.out;
  EXPECT_EQ(clean, 50);
  const std::string children = " FROM processes WHERE pid <> " + std::to_string(parent);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*)" + children), 50);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*)" + children + " AND events = 20"), 50);
  EXPECT_EQ(
      query_int(s.db(), "SELECT sum(dropped_ring_full + dropped_not_ready + lost_unpublished + malformed)" + children),
      0);
  EXPECT_EQ(
      query_int(s.db(), "SELECT sum(c.count) FROM calls c JOIN processes p ON p.id = c.process_id WHERE p.pid <> " +
                            std::to_string(parent)),
      1000);
  EXPECT_EQ(query_int(s.db(), "SELECT events + dropped_ring_full + dropped_not_ready + lost_unpublished + malformed "
                              "FROM processes WHERE pid = " +
                                  std::to_string(parent)),
            parent_calls);
}

// Row "exec chain of 4 images": each exec'd image gets its own segment (pid, pid.1, ...).
TEST(HeldUp, EachImageOfAnExecChainGetsItsOwnSegment) {
  Scratch s;
  const auto result = run("TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() + " run --no-report --out " + s.db() +
                          " -- " + held() + " exec 4");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  int pid = 0;
  ASSERT_EQ(std::sscanf(result.out.c_str(), "pid=%d", &pid), 1) << result.out;
  // Each image names its segment `<pid>`, else `<pid>.1`, … whichever is free when it starts: a
  // collector retires an image's segment at its exec (its liveness lock is gone), so a later
  // image may take a name again. What holds is one segment per image, each with its own events.
  const std::string base = own_prefix(s.job) + std::to_string(pid);
  // The calls of each image, in the order the images ran (its row's `events` also counts the
  // sampler's records, which a loaded machine gives an image time to make).
  EXPECT_EQ(query_text(s.db(), "SELECT group_concat(calls, ' ') FROM (SELECT (SELECT count(*) FROM events e WHERE "
                               "e.process_id = p.id) AS calls FROM processes p WHERE pid = " +
                                   std::to_string(pid) + " ORDER BY start_monotonic_ns)"),
            "5 4 3 2");
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes WHERE ended = 1 AND (segment = '" + base +
                                  "' OR segment LIKE '" + base + ".%')"),
            4);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes"), 4);
}

// Row "CUDA call from a signal handler (SIGUSR1 into a malloc-churning thread)": no deadlock, no
// crash, and every handler's call recorded or counted.
TEST(HeldUp, CudaCallsFromSignalHandlersNeitherDeadlockNorGetLost) {
  Scratch s;
  const auto result = run("TRAINSHIM_JOB=" + s.job + " timeout 60 " + trainshim_cli() + " run --no-report --out " +
                          s.db() + " -- " + held() + " signal 10000");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(result.out, "handled=10000\n");
  EXPECT_EQ(count_api(s.db(), "cudaMemcpyAsync"), 1);
  EXPECT_EQ(count_api(s.db(), "cudaStreamSynchronize") + lost(s.db()), 1 + 10000);
}

// Row "CUDA calls from a library constructor, atexit, pthread TLS destructors, after
// pthread_exit(main)": all recorded, no crash.
TEST(HeldUp, CallsFromConstructorsAtexitTlsDestructorsAndAfterMainExitedAreRecorded) {
  Scratch s;
  const auto result = run("TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() + " run --no-report --out " + s.db() +
                          " -- " + program("held_lifecycle_prog") + " 2>&1");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(result.out, "constructor rc=0\ntls destructor rc=0\nmain done\ntls destructor rc=0\natexit rc=0\n");
  EXPECT_EQ(count_api(s.db(), "cudaMemcpyAsync", "result = 0"), 6);
  EXPECT_EQ(count_api(s.db(), "cudaStreamSynchronize", "result = 0"), 4);
  EXPECT_EQ(lost(s.db()), 0);
}

// Row "Unwinding through code without unwind info and garbage rbp": no crash.
TEST(HeldUp, UnwindingThroughCodeWithoutUnwindInfoDoesNotCrash) {
  Scratch s;
  const auto result = run("TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() + " run --no-report --out " + s.db() +
                          " -- " + held() + " jit");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(result.out, "rc=0\n");
  EXPECT_EQ(count_api(s.db(), "cudaStreamSynchronize", "result = 0"), 1);
}

// Row "dlopen of libcudart after the shim initialised (RTLD_GLOBAL, RTLD_LOCAL)": a call made
// before the runtime was loaded does not stop later calls from reaching it, and they are recorded.
TEST(HeldUp, RuntimeLoadedLaterIsReachedAndRecorded) {
  for (const std::string scope : {"global", "local"}) {
    SCOPED_TRACE(scope);
    Scratch s;
    const auto result = run("TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() + " run --no-report --out " + s.db() +
                            " -- " + program("held_dlopen_prog") + " " + stub_cudart() + " " + scope);
    ASSERT_EQ(result.exit_code, 0) << result.out;
    // With no runtime loaded yet a hook answers as a runtime without a driver would.
    EXPECT_EQ(result.out, "before=35 copy=0 sync=0\n") << "35: cudaErrorInsufficientDriver";
    EXPECT_EQ(count_api(s.db(), "cudaMemcpyAsync", "result = 0"), 1);
    EXPECT_EQ(count_api(s.db(), "cudaStreamSynchronize", "result = 0"), 1);
  }
}

// The paths a traced command opened (strace -e trace=openat output), one per element.
std::set<std::string> opened_paths(const std::string& trace) {
  std::set<std::string> paths;
  for (const std::string& line : lines_of(trace)) {
    const auto open_quote = line.find('"');
    if (line.find("openat(") == std::string::npos || open_quote == std::string::npos) continue;
    paths.insert(line.substr(open_quote + 1, line.find('"', open_quote + 1) - open_quote - 1));
  }
  return paths;
}

// Row "Inertness of /bin/true under the shim (strace)": no thread, no shared memory, no file
// opened but the libraries the loader maps; and a program that links the runtime but calls
// nothing has no thread, descriptor or segment more than without the shim.
TEST(HeldUp, ProcessesThatCallNoCudaStayInert) {
  Scratch s;
  const std::string traced = "strace -f -qq -e trace=clone,clone3,fork,vfork,openat,open,creat,memfd_create,mmap -o ";
  ASSERT_EQ(run(traced + s.dir + "/plain.trace /bin/true").exit_code, 0);
  ASSERT_EQ(run(traced + s.dir + "/shim.trace -E TRAINSHIM_JOB=" + s.job + " -E LD_PRELOAD=" + shim() + " /bin/true")
                .exit_code,
            0);
  const std::string trace = read_file(s.dir + "/shim.trace");
  ASSERT_NE(trace.find("libtrainshim.so"), std::string::npos) << "the shim was not loaded: " << trace;
  for (const char* call :
       {"clone(", "clone3(", "fork(", "vfork(", "memfd_create(", "/dev/shm", "O_CREAT", "O_WRONLY", "O_RDWR"})
    EXPECT_EQ(trace.find(call), std::string::npos) << call << " in " << trace;
  const std::set<std::string> plain = opened_paths(read_file(s.dir + "/plain.trace"));
  for (const std::string& path : opened_paths(trace)) {
    const std::string name = fs::path(path).filename();
    EXPECT_TRUE(plain.contains(path) || name.find(".so") != std::string::npos) << "opened " << path;
  }
  const auto without = run(held() + " inert");
  ASSERT_EQ(without.exit_code, 0);
  ASSERT_TRUE(without.out.starts_with("threads=1 ")) << without.out;
  ASSERT_TRUE(without.out.ends_with(" segments=0\n")) << without.out;
  const auto inert = run(preload_env(s.job) + " " + held() + " inert");
  EXPECT_EQ(inert.exit_code, 0);
  EXPECT_EQ(inert.out, without.out) << "descriptors the test inherited are the same in both";
  EXPECT_FALSE(fs::exists(lock_of(s.job)));
  EXPECT_TRUE(shm_entries(own_prefix(s.job)).empty());
}

// Row "TRAINSHIM_RINGS=0, TRAINSHIM_SIDE_RECORDS=abc": defaults used (whatever is said about
// them), the job runs.
TEST(HeldUp, UnusableRingSettingsFallBackToTheDefaults) {
  Scratch s;
  auto segment_size = [&](const std::string& settings) -> long long {
    const auto result =
        run(settings + " TRAINSHIM_SPAWN_COLLECTOR=0 " + preload_env(s.job) + " " + held() + " segments");
    EXPECT_EQ(result.exit_code, 0) << settings;
    long long size = -1;
    const auto at = result.out.find(" size=");
    if (at != std::string::npos) size = std::stoll(result.out.substr(at + 6));
    remove_shm_entries(own_prefix(s.job));
    return size;
  };
  const long long defaults = segment_size("");
  ASSERT_GT(defaults, 0);
  EXPECT_NE(segment_size("TRAINSHIM_RINGS=1"), defaults) << "the size does not show the settings";
  EXPECT_EQ(segment_size("TRAINSHIM_RINGS=0"), defaults);
  EXPECT_EQ(segment_size("TRAINSHIM_SIDE_RECORDS=abc"), defaults);
  EXPECT_EQ(segment_size("TRAINSHIM_RINGS=0 TRAINSHIM_SIDE_RECORDS=abc"), defaults);
  EXPECT_NE(segment_size("TRAINSHIM_FIRST_RING_EVENTS=16"), defaults) << "the size does not show the first ring";
  EXPECT_EQ(segment_size("TRAINSHIM_FIRST_RING_EVENTS=-5"), defaults);
}

// Row "CLI: random file, /etc/passwd, empty file, DB truncated at each 4 KiB boundary, byte-mutated
// DBs x (report, report --json, audit, export) ...": exit 0, 1 or 2, never a crash or a hang, and
// a refusal names the file.
TEST(HeldUp, NoCommandCrashesOrHangsOnHostileFiles) {
  Scratch s;
  const std::string good = s.dir + "/good.db";
  ASSERT_EQ(run(trainshim_cli() + " run --no-report --out " + good + " -- " + program("accounting_prog")).exit_code, 0);
  const std::string original = read_file(good);
  std::mt19937 random(1130);
  auto byte = [&] { return char(std::uniform_int_distribution<int>(0, 255)(random)); };

  struct Input {
    std::string path;
    bool database_like;  // may be read as a run (exit 0, or 1 for a failed audit)
  };
  std::vector<Input> inputs;
  std::string noise(8192, '\0');
  for (char& c : noise) c = byte();
  write_file(s.dir + "/random.db", noise);
  write_file(s.dir + "/empty.db", "");
  inputs = {{s.dir + "/random.db", false}, {"/etc/passwd", false}, {s.dir + "/empty.db", false}};
  for (std::size_t cut = 4096; cut < original.size(); cut += 4096) {
    const std::string path = s.dir + "/cut" + std::to_string(cut) + ".db";
    write_file(path, original.substr(0, cut));
    inputs.push_back({path, true});
  }
  for (int i = 0; i < 30; ++i) {
    std::string bytes = original;
    const int changes = std::uniform_int_distribution<int>(1, 20)(random);
    for (int k = 0; k < changes; ++k)
      bytes[std::uniform_int_distribution<std::size_t>(100, bytes.size() - 1)(random)] = byte();
    const std::string path = s.dir + "/mutated" + std::to_string(i) + ".db";
    write_file(path, bytes);
    inputs.push_back({path, true});
  }
  for (const Input& input : inputs) {
    for (const std::string& command :
         std::vector<std::string>{"report", "report --json", "audit", "export -o " + s.dir + "/trace.json"}) {
      SCOPED_TRACE(command + " " + input.path);
      const auto r = run("timeout 20 " + trainshim_cli() + " " + command + " " + input.path + " 2>&1 >/dev/null");
      EXPECT_LE(r.exit_code, 2) << r.out;
      if (!input.database_like) {
        EXPECT_EQ(r.exit_code, 2) << r.out;
      }
      if (r.exit_code == 2) {
        EXPECT_NE(r.out.find(input.path), std::string::npos) << "the message does not name the file: " << r.out;
      }
    }
  }
  // Flags, subcommands, policy, baseline and formats that do not exist.
  write_file(s.dir + "/policy.toml", "[limits\nhidden_syncs = \"many\"\n");
  write_file(s.dir + "/baseline.json", "{\"format\": 7");
  for (const std::string& command : std::vector<std::string>{
           "report --frobnicate " + good, "frobnicate", "audit --policy " + s.dir + "/policy.toml " + good,
           "audit --baseline " + s.dir + "/baseline.json " + good, "audit --format yaml " + good,
           "export --format svg -o " + s.dir + "/t.svg " + good, "report " + s.dir + "/absent.db"}) {
    SCOPED_TRACE(command);
    const auto r = run("timeout 20 " + trainshim_cli() + " " + command + " 2>&1 >/dev/null");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_FALSE(r.out.empty()) << "no message";
  }
}

// Row "trainshim report in a directory with 1000 old DBs": picks the newest.
TEST(HeldUp, ReportWithoutADatabasePicksTheNewestOfAThousand) {
  Scratch s;
  const std::string newest = s.dir + "/trainshim-aaa.db";
  ASSERT_EQ(run("TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() + " run --no-report --out " + newest + " -- " +
                held() + " hammer 3 1")
                .exit_code,
            0);
  const auto old = fs::last_write_time(newest) - std::chrono::hours(24 * 365);
  for (int i = 0; i < 1000; ++i) {
    const std::string path = s.dir + "/trainshim-old" + std::to_string(i) + ".db";
    write_file(path, "not the newest run");
    fs::last_write_time(path, old + std::chrono::seconds(i));
  }
  const auto report = run("cd " + s.dir + " && " + trainshim_cli() + " report --json");
  ASSERT_EQ(report.exit_code, 0);
  const nlohmann::json doc = nlohmann::json::parse(report.out);
  ASSERT_EQ(doc.at("ranks").size(), 1u);
  EXPECT_EQ(find_row(doc.at("ranks")[0].at("copies"), {{"direction", "h2d"}}).at("calls"), 3);
}

// Row "JUnit escaping of & < > \" '": escaped, the document is well-formed.
TEST(HeldUp, JunitEscapesTheFiveXmlSpecialCharacters) {
  Scratch s;
  const std::string db = s.dir + "/a&b<c>d\"e'f.db";
  ASSERT_EQ(run("TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() + " run --no-report --out " + quoted(db) + " -- " +
                program("accounting_prog"))
                .exit_code,
            0);
  ASSERT_EQ(run("sqlite3 " + quoted(db) + " " + quoted("UPDATE native_frames SET function = 'f<&>\"''g'")).exit_code,
            0);
  // Against the baseline of a run without copies, each copy site is a violation named by its function.
  const std::string empty = s.dir + "/empty.db";
  ASSERT_TRUE(write_empty_database(empty, s.job + "_empty"));
  ASSERT_EQ(run(trainshim_cli() + " audit " + empty + " --write-baseline " + s.dir + "/baseline.json").exit_code, 0);
  const auto junit = run(trainshim_cli() + " audit --format junit --baseline " + s.dir + "/baseline.json " +
                         quoted(db) + " > " + s.dir + "/junit.xml");
  EXPECT_EQ(junit.exit_code, 1) << "the new copy sites fail the audit";
  const std::string xml = read_file(s.dir + "/junit.xml");
  EXPECT_NE(xml.find("a&amp;b&lt;c&gt;d&quot;e&apos;f.db"), std::string::npos) << xml;
  EXPECT_NE(xml.find("f&lt;&amp;&gt;&quot;&apos;g"), std::string::npos) << xml;
  EXPECT_EQ(xml.find("f<&>"), std::string::npos) << xml;
  const auto valid = run("xmllint --noout --schema " + std::string(Paths::source) + "/tests/junit/junit.xsd " + s.dir +
                         "/junit.xml 2>&1");
  EXPECT_EQ(valid.exit_code, 0) << valid.out;
}

// Row "TRAINSHIM_HANG_S=nan / 1e400 on a 2-rank run: no spurious hang reported". Both were taken
// as a threshold of 0, which made every late rank a hang (one rank of four 200 ms late to every
// step's all-reduces gave 9 hangs): a threshold that is no finite number of seconds is refused
// with a message naming it, and the job runs unchanged.
TEST(HeldUp, HangThresholdThatIsNoFiniteNumberIsRefused) {
  for (const std::string value : {"nan", "1e400"}) {
    SCOPED_TRACE("TRAINSHIM_HANG_S=" + value);
    Scratch s;
    s.segments_left = true;  // the collector refused to start: the segments wait for `trainshim collect`
    const auto result = run("TRAINSHIM_HANG_S=" + value + " STRAGGLER_DELAY_MS=200 TRAINSHIM_JOB=" + s.job + " " +
                            trainshim_cli() + " run --no-report --out " + s.db() + " -- " + Paths::source +
                            "/scripts/simrun -n 4 -- python3 " + Paths::source + "/tests/python/straggler.py 2>&1");
    EXPECT_EQ(result.exit_code, 0) << result.out;
    EXPECT_NE(result.out.find("TRAINSHIM_HANG_S=" + value + " is not a number of seconds above 0 and at most 604800"),
              std::string::npos)
        << result.out;
    EXPECT_FALSE(std::filesystem::exists(s.db())) << "a refused collector writes nothing";
  }
}

// Row "SQL injection: all values bound; the one formatted INSERT uses the sanitized job id":
// quotes in the job id and in the command line are stored and reported as they were.
TEST(HeldUp, QuotesInTheJobIdAndTheCommandAreStoredAsTheyWere) {
  Scratch s;
  const std::string job = s.job + "'); DROP TABLE events; --";
  const std::string argument = "it's \"quoted\"'); DROP TABLE processes; --";
  const auto result = run("TRAINSHIM_JOB=" + quoted(job) + " " + trainshim_cli() + " run --json --out " + s.db() +
                          " -- " + held() + " hammer 2 1 " + quoted(argument));
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(query_text(s.db(), "SELECT value FROM meta WHERE key = 'job'"), s.job + "____DROP_TABLE_events____");
  const std::string command = held() + " hammer 2 1 " + argument;
  EXPECT_EQ(query_text(s.db(), "SELECT command FROM processes"), command);
  EXPECT_EQ(query_int(s.db(), "SELECT sum(count) FROM calls"), 4);
  const auto json_start = result.out.find('{');
  ASSERT_NE(json_start, std::string::npos) << result.out;
  const nlohmann::json report = nlohmann::json::parse(result.out.substr(json_start));
  EXPECT_EQ(report.at("ranks")[0].at("command"), command);
}

}  // namespace
}  // namespace trainshim::test
