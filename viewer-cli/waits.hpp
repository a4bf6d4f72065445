#pragma once
// The all-reduce wait section of the report: who waits for whom, the straggler, and what the
// straggler's host was doing while the others waited for it.
#include <cstdint>
#include <string>
#include <vector>

#include "collectives.hpp"
#include "run_database.hpp"

namespace trainshim::cli {

struct HostActivity {
  std::string file, function;
  int line = 0;
  double share = 0;  // of the straggler's recorded calls inside its late windows
};

struct ProcessRef {
  const RunDatabase* db;
  int64_t process_id;
  int rank;
  int64_t steps;  // the rank's steps, 0 when none were found
};

struct WaitReport {
  CollectiveAnalysis analysis;
  std::vector<HostActivity> straggler_host;  // most frequent first
  int64_t untimed_capturing = 0;             // collectives on a stream being captured into a graph
  int64_t untimed_no_event = 0;              // no timing event could be had
};

WaitReport load_waits(const std::vector<ProcessRef>& processes);

}  // namespace trainshim::cli
