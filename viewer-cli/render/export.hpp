#pragma once
// `trainshim export DB... --format chrome -o trace.json`: a run as a Chrome trace-event file for Perfetto UI
// and chrome://tracing. What the trace holds: docs/formats.md, "The Chrome trace".
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "store/run_database.hpp"

namespace trainshim::cli {

// Thread ids of the synthetic GPU tracks: above any kernel thread id (PID_MAX_LIMIT is 2^22). From
// kGpuTrackBase: one per communicator (timed collectives); from kGpuActivityTrackBase: the GPU
// timeline's, one per device and CUPTI stream in order of (device, stream), then one "idle" track
// per device.
inline constexpr int64_t kGpuTrackBase = 1'000'000'000;
// The thread id of a process's step track: after its threads, before its GPU tracks.
inline constexpr int64_t kStepTrackTid = kGpuTrackBase - 1;
inline constexpr int64_t kGpuActivityTrackBase = 1'500'000'000;

// A process's `pid` in the trace is its own, unless processes of two nodes share it: then this plus
// its row id in its database, plus kSharedPidPerDatabase times the database's place among those
// exported (above every Linux pid, PID_MAX_LIMIT 2^22; a database holds at most 4,096 processes).
inline constexpr int64_t kSharedPidBase = 10'000'000;
inline constexpr int64_t kSharedPidPerDatabase = 100'000;

// An idle stretch of a device longer than this is marked on its idle track.
inline constexpr int64_t kExportIdleGapNs = 1'000'000;

// How one database's clock was put on the first one's: no two nodes share a clock.
struct ClockAlignment {
  int64_t offset_ns = 0;  // added to its times
  // "first" (the first database's clock), "collectives" (from the collectives it shares with an
  // aligned database: each completes at the same moment on every rank) or "wall clock" (shares none:
  // from the CLOCK_REALTIME its processes read at start, as far as the hosts' clocks agree).
  std::string aligned_by = "first";
  int64_t collectives = 0;  // shared collectives the offset is the median of
  int64_t spread_ns = 0;    // their median distance from it
};

// The databases' clocks put on the first one's. A collective's completion on each rank is where
// the trace draws the end of its GPU slice: at its host call, or after the previous one of its
// communicator, plus its GPU duration; the median over the shared collectives is robust to the few
// where one rank's GPU was still busy with earlier work when it called (the end drawn early).
std::vector<ClockAlignment> align_clocks(const std::vector<const RunDatabase*>& databases);

// Writes the whole trace of a job's databases (one per node; the first's clock is the trace's,
// align_clocks puts the others on it) to `out`; `step_name` says what a step is, as for `trainshim
// report` (empty: detected). Throws UsageError or InputError when a database cannot be read,
// std::runtime_error when `out` fails while writing (a full disk, a closed pipe).
void export_chrome_trace(const std::vector<const RunDatabase*>& databases, std::ostream& out,
                         const std::string& step_name = "");
inline void export_chrome_trace(const RunDatabase& db, std::ostream& out, const std::string& step_name = "") {
  export_chrome_trace(std::vector<const RunDatabase*>{&db}, out, step_name);
}

}  // namespace trainshim::cli
