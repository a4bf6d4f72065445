#pragma once
// `trainshim export DB --format chrome -o trace.json`: a run as a Chrome trace-event file (the
// JSON Object Format, {"traceEvents": [...], "displayTimeUnit": "ns"}) for Perfetto UI and
// chrome://tracing.
//
// What the trace holds:
//   - one process per recorded process (pid = its row id in the database, stable across exports),
//     named "rank N (host, pid P)" and sorted by rank; one track per recorded kernel thread id;
//   - every call of the `events` table (the calls kept one by one) and of `recent_events` (the window
//     of each process's most recent copies and polls) as a complete slice ("X") on its thread, ts
//     and dur in microseconds from the earliest call recorded in the database. Syncs (sync, free, poll classes
//     and D2H copies into pageable memory) are named by the operation classify() finds in their
//     stacks ("Tensor.item()"), with the user's frame; copies "memcpy h2d pageable"; collectives
//     and the other calls by their API name;
//   - each collective's GPU-side duration (`gpu_ns` of its row) on a track of its own per
//     communicator ("GPU collectives <id>", tid kGpuTrackBase + n), starting at the collective's
//     host call, or at the end of the previous GPU slice of that communicator when the two would
//     overlap (the GPU runs them one after the other; no GPU timestamps are recorded), with the
//     rank's wait: its duration minus the shortest duration of that (communicator, sequence) on
//     any rank of the database (args communicator, sequence, bytes, gpu_ns, wait_ns, and queued_ns:
//     how far after the host call the slice was placed);
//   - a flow (cat "collective") linking the GPU slices of one (communicator, sequence) across
//     ranks: "s" on the first rank, "t" on the ones between, "f" on the last;
//   - counters ("C") of the events each process lost, sampled at its first and its last event;
//   - in otherData, how many copies and polls the window shows of those recorded (copies_shown,
//     copies_recorded, polls_shown, polls_recorded, and the sentence `window`).
//
// The trace is written while the database is read, process by process, events in begin_ns order;
// only one map keyed by (communicator, sequence) is held (shortest duration, first and last rank),
// besides per-process caches keyed by stack and thread.
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
