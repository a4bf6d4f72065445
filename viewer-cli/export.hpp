#pragma once
// `trainshim export DB --format chrome -o trace.json`: a run as a Chrome trace-event file for Perfetto UI
// and chrome://tracing. What the trace holds: docs/formats.md, "The Chrome trace".
#include <cstdint>
#include <ostream>

#include "run_database.hpp"

namespace trainshim::cli {

// Thread ids of the synthetic GPU tracks: above any kernel thread id (PID_MAX_LIMIT is 2^22).
inline constexpr int64_t kGpuTrackBase = 1'000'000'000;

// Writes the whole trace to `out`. Throws UsageError or InputError when the database cannot be
// read, std::runtime_error when `out` fails while writing (a full disk, a closed pipe).
void export_chrome_trace(const RunDatabase& db, std::ostream& out);

}  // namespace trainshim::cli
