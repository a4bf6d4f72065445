#pragma once
// Runs real processes under the shim and reads back what trainshim recorded.
#include <sqlite3.h>

#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace trainshim::test {

struct Paths {
  static constexpr const char* bin = TRAINSHIM_TEST_BIN_DIR;
  static constexpr const char* programs = TRAINSHIM_TEST_PROGRAMS_DIR;
  static constexpr const char* simcuda = TRAINSHIM_TEST_SIMCUDA_DIR;
  // A second libcudart.so.13 that does nothing (tests/bench/stub_cudart.cpp).
  static constexpr const char* stub_cudart = TRAINSHIM_TEST_STUB_CUDART_DIR;
  static constexpr const char* source = TRAINSHIM_TEST_SOURCE_DIR;
  // The PyTorch stand-in (tests/torchlike): PYTHONPATH for `import torch`, with and without .symtab.
  static constexpr const char* torchlike_site = TRAINSHIM_TEST_TORCHLIKE_SITE;
  static constexpr const char* torchlike_stripped_site = TRAINSHIM_TEST_TORCHLIKE_STRIPPED_SITE;
};

struct Outcome {
  int exit_code;
  std::string out;  // standard output only; standard error goes to the test's log
};

// Runs `command` with /bin/sh; the simulated runtime is on LD_LIBRARY_PATH.
Outcome run(const std::string& command);

// A fresh directory and a job id no other test uses.
// A test's directory and job id. Its destructor fails the test if a collector of the job still runs
// 30 s after the test (none should outlive its job), or if the job left a file in /dev/shm
// (a segment, the collector's lock) that the test did not expect, and removes them.
struct Scratch {
  Scratch();
  ~Scratch();
  std::string dir;
  std::string job;
  std::string db() const { return dir + "/run.db"; }
  // The job's segments stay in /dev/shm on purpose: it ran with no collector (refused, or
  // TRAINSHIM_SPAWN_COLLECTOR=0 and nothing read them), as a real job's wait for `trainshim collect`.
  bool segments_left = false;
};

// Whether process `pid` runs: it exists and has not ended (a zombie its parent has not reaped yet
// has ended).
bool process_running(pid_t pid);

// The trainshim-collector processes of `job` that run now (their command line names the job).
std::vector<pid_t> collectors_of(const std::string& job);

std::string trainshim_cli();

// A test program built in tests/programs.
std::string program(const std::string& name);

// Recorded calls of `api`: without a condition, the sum of their `calls` counts; with an SQL
// condition `where` on a record's result, bytes, direction, host_memory or comm_size, the records
// of `events` and `recent_events` that satisfy it.
int64_t count_api(const std::string& db, const std::string& api, const std::string& where = "1");

// `command` run as another local user (nobody, 65534) with no groups, as an attacker on a shared
// machine would be; the tests themselves run as root. Files the attacker must reach need modes
// that let it (Scratch directories are made 0755 by `share_with_other_users`).
std::string as_other_user(const std::string& command);
inline constexpr unsigned kOtherUid = 65534;
void share_with_other_users(const Scratch& scratch);
// The environment of a job of `job` under the shim. Its on-demand collector exits after
// kTestCollectorIdleSeconds idle, not the default 10 s: each test waits for it (Scratch).
inline constexpr const char* kTestCollectorIdleSeconds = "2";
std::string preload_env(const std::string& job);

// Waits, bounded (60 s), for something a background process does: true once `condition` holds;
// the test then asserts on it, and a run that never gets there fails instead of hanging.
bool eventually(const std::function<bool()>& condition);

// `run(command)` on another thread.
std::future<Outcome> in_background(const std::string& command);

// A file that tests/programs/gated_copies waits for. Opened at the latest when the test ends, before
// the background processes are waited for (declare it after their futures).
struct Gate {
  std::string path;
  void open() const { std::ofstream(path).put('\n'); }
  ~Gate() { open(); }
};

// The number of the first line of `source` that contains `marker` (tests mark planted lines).
int marked_line(const std::string& source, const std::string& marker);

// A file's bytes, as much as could be read; empty when it cannot be opened. Never throws: a /proc
// file of a process that exits while it is read fails with ESRCH, which std::filebuf throws as
// ios_base::failure through an istreambuf_iterator.
std::string read_file(const std::string& path);

// The single integer a query returns.
int64_t query_int(const std::string& db, const std::string& sql);

// A database of no process, as a collector writes for a job that failed before its first CUDA call
// (`trainshim run` removes such a file; a collector started by hand keeps it); false when the
// collector failed.
bool write_empty_database(const std::string& path, const std::string& job);

// The rank's entry of a trainshim-report/1 document.
const nlohmann::json& rank_entry(const nlohmann::json& report, int rank);
// The row of `list` whose fields equal `match`, or null.
nlohmann::json find_row(const nlohmann::json& list, const nlohmann::json& match);

// The CPUs this process may run on, and their kernel cpulist form ("0-3,8").
std::vector<int> allowed_cpus();
std::string cpulist(const std::vector<int>& cpus);

}  // namespace trainshim::test
