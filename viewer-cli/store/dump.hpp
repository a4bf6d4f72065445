#pragma once
// `trainshim dump`: what each thread of a job's running processes is doing now, as the sampler's
// latest sample of it says (`threads_now`), with its Python frames: py-spy dump without ptrace.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "store/run_database.hpp"

namespace trainshim::cli {

struct DumpFrame {
  std::string function, file;
  int line = 0;
};

struct DumpThread {
  int64_t tid = 0;
  bool main = false;  // the process's main thread (tid == pid)
  std::string state;  // the state's letter, as stored
  int64_t syscall = -1;
  double for_s = 0;               // how long its samples had shown this stack, state and call, at the latest one
  int64_t at_unix_ns = 0;         // the latest sample
  std::vector<DumpFrame> frames;  // innermost first
};

struct DumpProcess {
  int rank = -1;
  int64_t pid = 0;
  std::string host;
  std::vector<DumpThread> threads;  // the main thread first, then by tid
  int64_t latest_unix_ns = 0;       // its newest sample; 0: none stored
};

// The processes of the database that have not ended, by rank then pid.
std::vector<DumpProcess> load_dump(const RunDatabase& db);

// "rank 0 (pid 100) thread 100 (main) sleeping in clock_nanosleep for 3.2 s", then "    at f (file:line)".
std::string render_dump_text(const std::vector<DumpProcess>& processes);
nlohmann::ordered_json render_dump_json(const std::vector<DumpProcess>& processes);

}  // namespace trainshim::cli
