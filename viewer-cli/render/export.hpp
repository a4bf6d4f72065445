#pragma once
// `trainshim export DB --format chrome -o trace.json`: a run as a Chrome trace-event file for Perfetto UI
// and chrome://tracing. What the trace holds: docs/formats.md, "The Chrome trace".
#include <cstdint>
#include <ostream>
#include <string>

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
// its row id in the database (above every Linux pid, PID_MAX_LIMIT 2^22).
inline constexpr int64_t kSharedPidBase = 10'000'000;

// An idle stretch of a device longer than this is marked on its idle track.
inline constexpr int64_t kExportIdleGapNs = 1'000'000;

// Writes the whole trace to `out`; `step_name` says what a step is, as for `trainshim report` (empty:
// detected). Throws UsageError or InputError when the database cannot be read, std::runtime_error
// when `out` fails while writing (a full disk, a closed pipe).
void export_chrome_trace(const RunDatabase& db, std::ostream& out, const std::string& step_name = "");

}  // namespace trainshim::cli
