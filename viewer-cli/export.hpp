#pragma once
// `trainshim export DB --format chrome -o trace.json`: a run as a Chrome trace-event file for Perfetto UI
// and chrome://tracing. What the trace holds: docs/formats.md, "The Chrome trace".
#include <cstdint>
#include <ostream>
#include <string>

#include "run_database.hpp"

namespace trainshim::cli {

// Thread ids of the synthetic GPU tracks: above any kernel thread id (PID_MAX_LIMIT is 2^22).
inline constexpr int64_t kGpuTrackBase = 1'000'000'000;

// Writes the whole trace to `out`. Throws UsageError when the database cannot be read or `out`
// fails while writing.
void export_chrome_trace(const RunDatabase& db, std::ostream& out);

// The subcommand: `database` is the .db path, `format` must be "chrome", `output` a file path
// ("-": standard output). A file is written beside its final name and renamed into place once
// complete, so a failed export leaves no half-written trace. Returns the exit code (0); throws
// UsageError for a wrong format, an unreadable database or an unwritable output.
int export_command(const std::string& database, const std::string& format, const std::string& output);

}  // namespace trainshim::cli
