#pragma once
// A process's calls as the analyses read them, typed: the aggregates the collector keeps per call
// shape and stacks (`calls`), the calls kept one by one (`events`, and the window of recent copies
// and polls in `recent_events`), and every process's collectives.
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "store/run_database.hpp"

namespace trainshim::cli {

// From a process's first call's begin to its last call's end (0 when it made none).
int64_t read_call_span_ns(const RunDatabase& db, int64_t process_id);

// One aggregate of `calls`: the calls of one API with one shape and one pair of stacks.
struct CallAggregateRow {
  int64_t api = 0;
  Direction direction = Direction::None;
  HostMemory host_memory = HostMemory::Unknown;
  int64_t native_stack = 0, python_stack = 0;
  bool null_object = false;
  Direction follows_copy = Direction::None;  // a wait: the copy it follows
  int64_t count = 0, bytes = 0, total_ns = 0;
};
// A process's aggregates of the API classes `keep` selects, in order of their first call.
std::vector<CallAggregateRow> read_call_aggregates(const RunDatabase& db, int64_t process_id, bool (*keep)(ApiClass));

// A call kept one by one.
struct CallEventRow {
  int64_t tid = 0, begin_ns = 0, end_ns = 0, api = 0;
  Direction direction = Direction::None;
  HostMemory host_memory = HostMemory::Unknown;
  int64_t native_stack = 0, python_stack = 0, object = 0, stream = 0;
  Direction follows_copy = Direction::None;
  int64_t result = 0;  // the real function's return code
};
// A process's calls of the classes `from_events` selects in `events` and of those `from_recent`
// selects in `recent_events` (none when null), by begin then end; a call in both is seen once.
void for_each_call_event(const RunDatabase& db, int64_t process_id, bool (*from_events)(ApiClass),
                         bool (*from_recent)(ApiClass), const std::function<void(const CallEventRow&)>& fn);

// A process's GPU timeline edges, in order: when the shim turned its timeline on (true) or off
// (empty for a database of a trainshim that did not record them).
std::vector<std::pair<int64_t, bool>> read_gpu_timeline_edges(const RunDatabase& db, int64_t process_id);

// A collective call (NCCL's, point-to-point included) with its GPU timing when it has one.
struct CollectiveEventRow {
  int64_t process_id = 0, api = 0, begin_ns = 0, bytes = 0, flags = 0, communicator = 0;
  int64_t rank_in_comm = 0, comm_size = 0, peer = 0, sequence = 0, exchange = 0;
  std::optional<int64_t> gpu_ns;
};
// Every process's collective calls in one pass, in the table's order (not by process or time): a
// large job's ranks have tens of thousands each, which an index would make one lookup each.
void for_each_collective_event(const RunDatabase& db, const std::function<void(const CollectiveEventRow&)>& fn);
// One process's collective calls, through the index, unsorted.
void for_each_collective_event(const RunDatabase& db, int64_t process_id,
                               const std::function<void(const CollectiveEventRow&)>& fn);

}  // namespace trainshim::cli
