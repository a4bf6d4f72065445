#include "store/trace_rows.hpp"

#include <fmt/format.h>

#include "trainshim/protocol.hpp"

namespace trainshim::cli {

namespace {

// The records of `events` that are no host call: a timing is folded into its collective's row (one
// whose collective was not read yet has a row of its own for a while); the GPU timeline's edges.
std::string not_host_call_apis() {
  return "(SELECT id FROM apis WHERE class IN " +
         api_classes_sql([](ApiClass c) { return c == ApiClass::CollectiveTiming || c == ApiClass::GpuWindow; }) + ")";
}
std::string collective_apis() {
  return "(SELECT id FROM apis WHERE class IN " + api_classes_sql(ApiClass::Collective) + ")";
}
// Point-to-point calls are numbered per peer: their numbers are no collective's (flag 8).
constexpr const char* kNotPointToPoint = "(flags & 8) = 0";
static_assert(kPointToPoint == 8);

}  // namespace

void for_each_host_call(const RunDatabase& db, int64_t process_id, const std::function<void(const HostCallRow&)>& fn) {
  constexpr const char* kColumns =
      "tid, api, begin_ns, end_ns, bytes, direction, host_memory, stream, object, detail, "
      "rank_in_comm, comm_size, result, native_stack, python_stack, sequence, follows_copy";
  Statement q(db, fmt::format("SELECT {0} FROM events WHERE process_id = ?1 AND api NOT IN {1} UNION ALL "
                              "SELECT {0} FROM recent_events WHERE process_id = ?1 ORDER BY begin_ns",
                              kColumns, not_host_call_apis())
                      .c_str());
  q.bind(1, process_id);
  const Vocabulary& names = db.vocabulary();
  HostCallRow row;
  while (q.step()) {
    row.tid = q.integer(0);
    row.api = q.integer(1);
    row.begin_ns = q.integer(2);
    row.end_ns = q.integer(3);
    row.bytes = q.integer(4);
    row.direction = names.direction(q.integer(5));
    row.host_memory = names.host_memory(q.integer(6));
    row.stream = q.integer(7);
    row.object = q.integer(8);
    row.detail = q.integer(9);
    row.rank_in_comm = q.integer(10);
    row.comm_size = q.integer(11);
    row.result = q.integer(12);
    row.native_stack = q.integer(13);
    row.python_stack = q.integer(14);
    row.sequence = q.integer(15);
    row.follows_copy = names.direction(q.integer(16));
    fn(row);
  }
}

void for_each_timed_collective(const RunDatabase& db, int64_t process_id,
                               const std::function<void(const TimedCollectiveRow&)>& fn) {
  Statement q(db, fmt::format("SELECT object, sequence, begin_ns, gpu_ns, bytes, api FROM events WHERE "
                              "process_id = ? AND api IN {} AND gpu_ns IS NOT NULL AND {} "
                              "ORDER BY object, sequence, begin_ns",
                              collective_apis(), kNotPointToPoint)
                      .c_str());
  q.bind(1, process_id);
  while (q.step()) fn({q.integer(0), q.integer(1), q.integer(2), q.integer(3), q.integer(4), q.integer(5)});
}

void for_each_collective_gpu_time(const RunDatabase& db, const std::function<void(const CollectiveGpuRow&)>& fn) {
  Statement q(db, fmt::format("SELECT process_id, object, sequence, min(gpu_ns) FROM events WHERE api IN {} AND "
                              "gpu_ns IS NOT NULL AND {} GROUP BY process_id, object, sequence",
                              collective_apis(), kNotPointToPoint)
                      .c_str());
  while (q.step()) fn({q.integer(0), q.integer(1), q.integer(2), q.integer(3)});
}

std::vector<std::pair<int64_t, int64_t>> read_gpu_streams(const RunDatabase& db, int64_t process_id) {
  std::vector<std::pair<int64_t, int64_t>> out;
  Statement q(db, "SELECT DISTINCT device, stream FROM gpu_activities WHERE process_id = ? ORDER BY device, stream");
  q.bind(1, process_id);
  while (q.step()) out.emplace_back(q.integer(0), q.integer(1));
  return out;
}

bool has_gpu_activities(const RunDatabase& db) {
  Statement q(db, "SELECT EXISTS (SELECT 1 FROM gpu_activities)");
  return q.step() && q.integer(0) != 0;
}

int64_t read_first_call_ns(const RunDatabase& db) {
  Statement q(db, "SELECT coalesce(min(first_begin_ns), 0) FROM calls");
  return q.step() ? q.integer(0) : 0;
}

std::optional<int64_t> read_wall_clock_offset(const RunDatabase& db) {
  Statement q(db, "SELECT start_realtime_ns - start_monotonic_ns FROM processes ORDER BY id LIMIT 1");
  if (!q.step()) return std::nullopt;
  return q.integer(0);
}

RecentWindow read_recent_window(const RunDatabase& db) {
  RecentWindow w;
  const auto is_copy = [](const Statement& row) { return api_class_named(row.text(0)) == ApiClass::Copy; };
  const std::string copies_and_polls =
      api_classes_sql([](ApiClass c) { return c == ApiClass::Copy || c == ApiClass::Poll; });
  // Shown: the window's, and those kept in `events` with their stacks (the copies a sync waited
  // for, the polls a sampled stack names), as the trace's host calls read both tables.
  Statement shown(db, fmt::format("SELECT a.class, count(*) FROM (SELECT api FROM recent_events UNION ALL SELECT api "
                                  "FROM events) r JOIN apis a ON a.id = r.api WHERE a.class IN {} GROUP BY a.class",
                                  copies_and_polls)
                          .c_str());
  while (shown.step()) (is_copy(shown) ? w.copies_shown : w.polls_shown) += shown.integer(1);
  Statement recorded(db, ("SELECT a.class, sum(c.count) FROM calls c JOIN apis a ON a.id = c.api WHERE a.class IN " +
                          copies_and_polls + " GROUP BY a.class")
                             .c_str());
  while (recorded.step()) (is_copy(recorded) ? w.copies_recorded : w.polls_recorded) += recorded.integer(1);
  return w;
}

}  // namespace trainshim::cli
