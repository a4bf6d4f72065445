#pragma once
// The rows `trainshim export` streams into the trace, typed: each process's host calls and its timed
// collectives, one row at a time (a trace is never held whole), its GPU streams, and the run's
// totals the trace's header states. Its GPU activities are read with rows.hpp's reader.
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "store/run_database.hpp"

namespace trainshim::cli {

// A host call as the trace shows it: the calls kept one by one (no collective timing, no GPU
// window edge) and the window of recent copies and polls.
struct HostCallRow {
  int64_t tid = 0, api = 0, begin_ns = 0, end_ns = 0, bytes = 0;
  Direction direction = Direction::None;
  HostMemory host_memory = HostMemory::Unknown;
  int64_t stream = 0, object = 0, detail = 0;
  int64_t rank_in_comm = 0, comm_size = 0, result = 0;
  int64_t native_stack = 0, python_stack = 0, sequence = 0;
  Direction follows_copy = Direction::None;
};
// A process's host calls, by begin.
void for_each_host_call(const RunDatabase& db, int64_t process_id, const std::function<void(const HostCallRow&)>& fn);

// A collective (not point-to-point) its process timed on the GPU.
struct TimedCollectiveRow {
  int64_t communicator = 0, sequence = 0, host_begin_ns = 0, gpu_ns = 0, bytes = 0, api = 0;
};
// A process's timed collectives, by communicator, sequence and begin.
void for_each_timed_collective(const RunDatabase& db, int64_t process_id,
                               const std::function<void(const TimedCollectiveRow&)>& fn);

// Per process and (communicator, sequence), the shortest GPU time of its timed calls.
struct CollectiveGpuRow {
  int64_t process_id = 0, communicator = 0, sequence = 0, min_gpu_ns = 0;
};
void for_each_collective_gpu_time(const RunDatabase& db, const std::function<void(const CollectiveGpuRow&)>& fn);

// A process's (device, stream) pairs, in order.
std::vector<std::pair<int64_t, int64_t>> read_gpu_streams(const RunDatabase& db, int64_t process_id);
// Whether any process recorded a GPU timeline.
bool has_gpu_activities(const RunDatabase& db);

// The first recorded call's begin (0 when none): the trace's time origin.
int64_t read_first_call_ns(const RunDatabase& db);

// CLOCK_REALTIME minus CLOCK_MONOTONIC as the database's first process read them at its start
// (none without a process): what puts the node's clock on the wall clock.
std::optional<int64_t> read_wall_clock_offset(const RunDatabase& db);

// Copies and polls are kept one by one only in a window of each process's most recent ones (and
// where a sync or a sampled stack needs them, in `events`); every one of them is counted in `calls`.
struct RecentWindow {
  int64_t copies_shown = 0, copies_recorded = 0, polls_shown = 0, polls_recorded = 0;
};
RecentWindow read_recent_window(const RunDatabase& db);

}  // namespace trainshim::cli
